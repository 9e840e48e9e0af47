"""torch_xla.experimental.assume_pure: trace a pure function once per input
signature and replay it as one graph node.

The first call with given argument structure, tensor shapes/dtypes and
non-tensor values traces the function on placeholder tensors (sub-graph
capture); later calls skip PyTorch tracing altogether and add one node whose
lowering is the captured graph. Gradients flow to the tensor arguments (the
backward is the `jax.vjp` of the captured graph, one more node).
"""
import functools

import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.engine import api

__all__ = ["assume_pure", "assume_pure_torch", "PureModule"]

# traced functions of assume_pure_torch(use_cache=True), by the function's name
_XLA_COMPUTATION_CACHE = {}


def assume_pure(fn, *, add_rng_seed_argument=False):
    """Decorate a pure function of XLA tensors: traced once per input signature.

    Pure: its result depends only on its arguments and it changes nothing
    outside itself. Tensors it closes over are frozen at the first trace (pass
    weights as arguments; `PureModule` does it for a module). Random ops inside
    draw the same numbers on every call, unless `add_rng_seed_argument=True`:
    then each call takes a keyword `rng_seed` (an int) and the draws follow it."""

    cache = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        seed = None
        if add_rng_seed_argument:
            assert "rng_seed" in kwargs, "Missing keyword argument rng_seed."
            seed = kwargs.pop("rng_seed")
            seed = int(seed.item()) if isinstance(seed, torch.Tensor) else int(seed)
        leaves, tree = tree_flatten((args, kwargs))
        is_t = tuple(isinstance(x, torch.Tensor) for x in leaves)
        tensors = [x for x, t in zip(leaves, is_t) if t]
        for t in tensors:
            if not api.is_xla_tensor(t):
                raise TypeError(f"assume_pure: tensor arguments must be on the XLA device, got {t.device}")
        statics = [x for x, t in zip(leaves, is_t) if not t]
        avals = tuple(api.tensor_aval(t) for t in tensors)
        key = (tree, is_t, tuple(api.static_key(s) for s in statics), avals)
        entry = cache.get(key)
        if entry is None:
            out_info = []

            def flat(*ts):
                ti, si = iter(ts), iter(statics)
                a, k = tree_unflatten([next(ti) if t else next(si) for t in is_t], tree)
                out = fn(*a, **k)
                ol, ot = tree_flatten(out)
                out_info.append((ot, tuple(isinstance(o, torch.Tensor) for o in ol),
                                 [o for o in ol if not isinstance(o, torch.Tensor)]))
                return [o for o in ol if isinstance(o, torch.Tensor)]

            handle = api.pure_function(flat, avals, seeded=add_rng_seed_argument)
            entry = cache[key] = (handle, out_info[0])
        handle, (out_tree, out_is_t, out_statics) = entry
        outs = api.apply_pure(handle, tensors, seed)
        oi, si = iter(outs), iter(out_statics)
        return tree_unflatten([next(oi) if t else next(si) for t in out_is_t], out_tree)

    return wrapper


def assume_pure_torch(func, use_cache=False):
    """The PyTorch-tracing flavour of `assume_pure`: `func` is traced to one
    graph node per call. With `use_cache=True` the trace is kept in
    `_XLA_COMPUTATION_CACHE` under the function's name and reused by later calls
    with the same input signature (no retracing, no recompiling)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if use_cache:
            pure = _XLA_COMPUTATION_CACHE.get(func.__name__)
            if pure is None:
                pure = _XLA_COMPUTATION_CACHE[func.__name__] = assume_pure(func)
        else:
            pure = assume_pure(func)
        return pure(*args, **kwargs)

    return wrapper


def _pure_forward(module, params, buffers, args, kwargs):
    return torch.func.functional_call(module, (params, buffers), args, kwargs)


class PureModule(nn.Module):
    """Wraps a module whose forward is pure: traced once per input signature
    (its parameters and buffers are passed as arguments, so training updates
    them as usual)."""

    def __init__(self, module):
        super().__init__()
        self._module = module
        self._pure_forward = assume_pure(functools.partial(_pure_forward, self._module))

    def forward(self, *args, **kwargs):
        return self._pure_forward(dict(self._module.named_parameters()),
                                  dict(self._module.named_buffers()), args, kwargs)
