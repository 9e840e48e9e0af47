"""torch_xla.experimental.fori_loop: `fori_loop` and `while_loop` as one
`lax.while_loop` node (forward only, as upstream).

`cond_fn` and `body_fn` are traced once each on placeholder tensors of the
carried values' shapes; tensors they close over (a module's weights) become
operands of the loop node. `torch._higher_order_ops.while_loop` on XLA tensors
runs here too: importing this module registers the loop node as the XLA tensor
implementation of PyTorch's `while_loop` higher-order op.
"""
import torch
from torch._higher_order_ops.while_loop import while_loop_op
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.engine import api

__all__ = ["fori_loop", "while_loop"]


def _device_tensor(v, like=None):
    if isinstance(v, torch.Tensor):
        return v if api.is_xla_tensor(v) else v.to("xla")
    dtype = torch.int64 if isinstance(v, int) else None
    return torch.tensor(v, dtype=dtype, device="xla")


def while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=None):
    """Run `carried = body_fn(*carried, *additional_inputs)` while
    `cond_fn(*carried, *additional_inputs)` is true; -> the final carried values
    (a tuple). `carried_inputs` is a tuple or list of XLA tensors (Python ints
    become int64 device scalars); `body_fn` returns values of the same shapes.
    Forward only: the result does not require grad."""
    additional = tuple(additional_inputs or ())
    carried = [_device_tensor(v) for v in carried_inputs]
    n = len(carried)

    def cond_flat(*c):
        out = cond_fn(*c, *additional)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"while_loop: cond_fn must return a tensor, got {type(out).__name__}")
        return [out]

    def body_flat(*c):
        out = body_fn(*c, *additional)
        if isinstance(out, torch.Tensor):
            out = (out,)
        out = list(out)
        if len(out) != n:
            raise ValueError(f"while_loop: body_fn returned {len(out)} values for {n} carried inputs")
        # a body may return a value of another dtype (1 + int32 tensor): keep the carry's
        return [o.to(c_.dtype) if isinstance(o, torch.Tensor) and o.dtype != c_.dtype
                else (o if isinstance(o, torch.Tensor) else _device_tensor(o).to(c_.dtype))
                for o, c_ in zip(out, c)]

    return tuple(api.while_loop(cond_flat, body_flat, carried))


def fori_loop(lower, upper, body_fun, *input_value):
    """Run `values = body_fun(*values)` for `upper - lower` iterations;
    -> `(remaining iteration count, *final values)`, as upstream returns it.
    `lower`/`upper` are ints or 0-dim XLA tensors."""
    iteri = _device_tensor(upper) - _device_tensor(lower)

    def cond_fn(i, *values):
        return i > 0

    def body_fn(i, *values):
        out = body_fun(*values)
        if isinstance(out, torch.Tensor):
            out = (out,)
        return (i - 1, *out)

    return while_loop(cond_fn, body_fn, (iteri, *input_value))


def _hop_impl(cond_fn, body_fn, carried_inputs, additional_inputs, *rest, **kwargs):
    flat, spec = tree_flatten(tuple(carried_inputs))
    out = while_loop(cond_fn, body_fn, flat, additional_inputs)
    return tree_unflatten(list(out), spec)


# torch's while_loop higher-order op reaches a tensor subclass through the
# Python dispatch key, keyed by the subclass
if api.tensor_class() not in while_loop_op.python_key_table:
    while_loop_op.py_impl(api.tensor_class())(_hop_impl)
