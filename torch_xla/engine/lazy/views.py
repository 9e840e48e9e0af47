"""Aliasing: views of a base and mutation through either.

A view is its base plus a chain of view steps (the OpEntry of each aten view
op at its input's aval, and which output it took). Reading a view re-applies
the chain to the base's current value when the base changed since the view's
value was cached. Writing a view scatters the new value back through the
chain into a new base value, so the base and every other view see it.

Views report the strides and storage offset they have in eager PyTorch
(from the view op's meta kernel on an input of the same layout), so
`is_contiguous()`, `.contiguous()` and `reshape` copy exactly when eager
copies. `as_strided` is taken relative to the root base's storage, as
PyTorch takes it relative to the storage.
"""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..ir import node as ir
from . import tensor
from ..ops.registry import lower
from .tracing import OpInfo, ValueArg, apply_entry, trace_node


def _apply_step(step, v, aval):
    entry, idx = step
    h = hash((v[0].hash + v[1], entry.hash))
    node = ir.Node(ir.OP, entry, (v,), h)
    return (node, idx), entry.out_avals[idx]


def view_value(t):
    base = t._xb
    if not t._chain:
        return base._v
    if t._vgen == base._gen:
        return t._v
    v, aval = base._v, base._aval
    for step in t._chain:
        v, aval = _apply_step(step, v, aval)
    t._v = v
    t._vgen = base._gen
    tensor.pending_views.append(tensor._ref(t))
    return v


def _root(src):
    if src._xb is None:
        return src, (), src._gen
    return src._xb, src._chain, src._xb._gen


_GEOM = {}


def _contiguous_strides(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))


def _geometry(info, entry, src, args, kwargs):
    """(strides, storage_offset) of each output of a view op, as eager PyTorch
    lays them out (None where contiguous at offset 0), from the op's meta
    kernel on an input with src's strides. Memoised per entry and input layout."""
    shape, dtype = src._aval
    if src._xb is None:  # a base holds its value contiguous at offset 0
        key = entry
        got = _GEOM.get(key)
        if got is not None:
            return got
        stride, off = _contiguous_strides(shape), 0
    else:
        stride, off = tuple(src.stride()), src.storage_offset()
        key = (entry, stride, off)
        got = _GEOM.get(key)
        if got is not None:
            return got
    try:
        n = 0 if 0 in shape else off + sum((s - 1) * st for s, st in zip(shape, stride)) + 1
        m = torch.empty(n, dtype=dtype, device="meta").as_strided(shape, stride, off)
        out = info.func(m, *args[1:], **kwargs)
        outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if o is not None]
        got = []
        for o in outs:
            g = (tuple(o.stride()), o.storage_offset())
            got.append(None if g == (_contiguous_strides(tuple(o.shape)), 0) else g)
    except Exception:  # noqa: BLE001 - eager would refuse (e.g. view of a transposed tensor): keep contiguous
        got = [None] * len(entry.out_avals)
    if len(_GEOM) > 65536:
        _GEOM.clear()
    _GEOM[key] = got
    return got


def make_view_handler(info):
    """Handler for an aten view op (transpose, select, view, split, ...)."""
    if info.lowering is None:
        def missing(args, kwargs):
            from .tracing import where
            raise NotImplementedError(f"torch_xla: view op aten::{info.name} has no lowering (at {where()})")
        return missing
    as_strided = info.name.split(".")[0] == "as_strided"

    def handler(args, kwargs):
        src = args[0]
        if as_strided and src._xb is not None:
            # relative to the storage, i.e. the root base
            args = list(args)
            off = args[3] if len(args) > 3 else kwargs.pop("storage_offset", None)
            if off is None:
                off = src.storage_offset()
            args = (src._xb, args[1], args[2], off)
            src = src._xb
        node, entry = trace_node(info, args, kwargs)
        base, chain, gen = _root(src)
        geom = _geometry(info, entry, src, args, kwargs)
        if entry.out_struct is None:
            return tensor.new_view(base, chain + ((entry, 0),), entry.out_avals[0], (node, 0), gen, geom[0])
        typ, struct = entry.out_struct
        return typ(tensor.new_view(base, chain + ((entry, i),), entry.out_avals[i], (node, i), gen, geom[i])
                   for i in range(len(entry.out_avals)))
    return handler


def _geom_of(t):
    g = (tuple(t.stride()), t.storage_offset())
    return None if g == (_contiguous_strides(tuple(t.shape)), 0) else g


def alias(t):
    """detach/alias: a new tensor object on the same storage."""
    base, chain, gen = _root(t)
    if t._xb is None:
        return tensor.new_view(base, chain, t._aval, t._v, gen)
    return tensor.new_view(base, chain, t._aval, view_value(t), gen, _geom_of(t))


# ---------------------------------------------------------------------------
# view ops whose rules live here (complex <-> real reinterpretation)

@lower("view_as_real", "view_as_real_copy")
def _view_as_real(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@lower("view_as_complex", "view_as_complex_copy")
def _view_as_complex(x):
    return lax.complex(x[..., 0], x[..., 1])


# ---------------------------------------------------------------------------
# mutation

def _scatter_meta(parent, new, *, step):
    return parent.new_empty(parent.shape)


def _scatter_lowering(parent, new, *, step):
    """parent with its view (step) replaced by new: the inverse of one view step."""
    entry, idx = step
    name = entry.name.split(".")[0]
    # bijective reinterpretations: invert directly
    if name in ("view_as_real", "view_as_real_copy"):
        return lax.complex(new[..., 0], new[..., 1]).astype(parent.dtype)
    if name in ("view_as_complex", "view_as_complex_copy"):
        return jnp.stack([jnp.real(new), jnp.imag(new)], axis=-1).astype(parent.dtype)
    if name == "real" and jnp.iscomplexobj(parent):
        return lax.complex(new.astype(parent.real.dtype), jnp.imag(parent))
    if name == "imag" and jnp.iscomplexobj(parent):
        return lax.complex(jnp.real(parent), new.astype(parent.real.dtype))
    if new.dtype != parent.dtype and entry.name == "view.dtype":
        return _bitcast(new, parent.dtype, parent.shape)

    def view_of(p):
        return apply_entry(entry, [p])[idx]

    new = new.astype(parent.dtype)
    if jnp.issubdtype(parent.dtype, jnp.floating) or jnp.issubdtype(parent.dtype, jnp.complexfloating):
        # a view is linear in its input: its transpose places new values, and
        # the transpose of ones marks which positions the view covers
        out, vjp = jax.vjp(view_of, parent)
        placed = vjp(new.astype(out.dtype))[0]
        mask = vjp(jnp.ones(out.shape, out.dtype))[0]
        return jnp.where(mask != 0, placed, parent)
    # integer/bool: push element positions through the view, then scatter
    n = int(np.prod(parent.shape))
    pos = jnp.arange(n, dtype=jnp.int64).reshape(parent.shape)
    pos_view = view_of(pos)
    flat = parent.reshape(-1).at[pos_view.reshape(-1)].set(new.reshape(-1))
    return flat.reshape(parent.shape)


def _bitcast(x, dtype, shape):
    src = jnp.dtype(x.dtype).itemsize
    dst = jnp.dtype(dtype).itemsize
    if src == dst:
        out = lax.bitcast_convert_type(x, dtype)
    elif src > dst:
        out = lax.bitcast_convert_type(x, dtype)  # (..., n) -> (..., n, src/dst)
        out = out.reshape(out.shape[:-2] + (-1,))
    else:
        out = lax.bitcast_convert_type(x.reshape(x.shape[:-1] + (-1, dst // src)), dtype)
    return out.reshape(shape)


_OVERLAP_MSG = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                 "memory location. Please clone() the tensor before performing the operation.")


def _check_no_overlap(t):
    """PyTorch refuses writes into views where elements share memory (expand,
    overlapping unfold); so do we."""
    for entry, _ in t._chain:
        name = entry.name.split(".")[0]
        if name in ("expand", "expand_copy", "broadcast_to"):
            ins = entry.in_avals[0][0]
            out = entry.out_avals[0][0]
            pad = len(out) - len(ins)
            if any(o != 1 and (i < 0 or ins[i] == 1) for o, i in
                   zip(out, [-1] * pad + list(range(len(ins))))):
                raise RuntimeError(_OVERLAP_MSG)
        elif name in ("unfold", "unfold_copy"):
            size, step = entry.template[2], entry.template[3]
            if isinstance(size, int) and isinstance(step, int) and step < size:
                raise RuntimeError(_OVERLAP_MSG)


_SCATTER = OpInfo("view_scatter", None, _scatter_lowering, meta=_scatter_meta)


def assign(t, v, aval=None, fresh=False):
    """Make v the new value of tensor t (a base or a view). v has t's aval.
    A device-data value that another tensor may hold too (fresh=False) is
    marked shared, so that a later barrier never donates its buffer."""
    base = t._xb
    if v[0].kind == ir.DATA and not fresh:
        v[0].exclusive = False
    if base is None:
        old = t._v
        t._v = v
        t._gen += 1
        if old[0].kind == ir.DATA:
            t._last_data = old[0]
            if v[0].kind == ir.OP:
                tensor.pending.append(tensor._ref(t))
        elif old[0].kind == ir.SCALAR and v[0].kind == ir.OP:
            tensor.pending.append(tensor._ref(t))
        elif old[0].kind == ir.OP and v[0].kind == ir.DATA:
            # an upload into a fresh `empty` (tensor.to("xla"), torch.tensor(...,
            # device="xla")): nothing is pending any more; dropping its entry keeps
            # the tensor free of weak references (nn.Module._apply may swap it)
            tensor.drop_last_pending(t)
        return
    _check_no_overlap(t)
    # through the chain: parents[i] is the input of chain step i
    parents = []
    pv, paval = base._v, base._aval
    for step in t._chain:
        parents.append((pv, paval))
        pv, paval = _apply_step(step, pv, paval)
    cur, caval = v, t._aval
    for step, (pv, paval) in zip(reversed(t._chain), reversed(parents)):
        node, _ = trace_node(_SCATTER, (ValueArg(pv, paval), ValueArg(cur, caval)), {"step": step})
        cur, caval = (node, 0), paval
    assign(base, cur)
    t._v = v
    t._vgen = base._gen
    if v[0].kind == ir.OP:
        # a barrier computes it beside its base, as a view derived by reading: else the
        # next graph re-derives it from the base (a gradient accumulated into a view
        # alternated between two graphs, one more compile than upstream's)
        tensor.pending_views.append(tensor._ref(t))


# ---------------------------------------------------------------------------
# changing a tensor's metadata: .data =, set_, resize_

def _swap_meta(t, shape, dtype, geom=None):
    """Give the PyTorch-visible tensor t a new shape/dtype (its Python state is
    kept: only sizes, strides and dtype are copied from a fresh wrapper)."""
    if geom is None:
        fresh = torch.Tensor._make_wrapper_subclass(type(t), shape, dtype=dtype, device=t.device)
    else:
        fresh = torch.Tensor._make_wrapper_subclass(type(t), shape, strides=geom[0], storage_offset=geom[1],
                                                    dtype=dtype, device=t.device)
    torch._C.TensorBase.data.__set__(t, fresh)


def _value(t):
    return t._v if t._xb is None else view_value(t)


def _make_alias_of(t, source):
    """t (base or view) becomes another name for source's storage."""
    if t is source:
        return t
    base, chain, gen = _root(source)
    if base is t:
        raise RuntimeError("torch_xla: set_ of a tensor to a view of itself is not supported")
    _swap_meta(t, source._aval[0], source._aval[1], _geom_of(source) if source._xb is not None else None)
    t._v = _value(source)
    t._aval = source._aval
    t._xb = base
    t._chain = chain
    t._vgen = gen
    return t


def set_data(t, new):
    """`t.data = new`: t takes new's shape, dtype and current value. (t keeps its
    own storage: later in-place changes of `new` do not reach t.)"""
    if not isinstance(new, tensor.XLATensor):
        raise RuntimeError(
            f"torch_xla: `tensor.data = other` needs other on the XLA device too, got a {new.device} tensor; "
            f"use other.to('xla')")
    torch._C.TensorBase.data.__set__(t, new)  # sizes, dtype (and PyTorch's own checks)
    if new._xb is not None and _geom_of(new) is not None:
        _swap_meta(t, new._aval[0], new._aval[1])  # t holds the value as a contiguous base
    v = _value(new)
    if v[0].kind == ir.DATA:
        v[0].exclusive = False
    if t._xb is None:
        t._aval = new._aval
        assign(t, v)
        return
    # a view (an nn.Parameter is an alias of its data) becomes a base of its own
    t._xb = None
    t._aval = new._aval
    t._v = v
    t._gen = getattr(t, "_gen", 0) + 1
    t._last_data = None
    if v[0].kind == ir.OP:
        tensor.pending.append(tensor._ref(t))


def set_empty(t):
    """set_(): t becomes an empty tensor with storage of its own."""
    node, _ = trace_node(_RESIZE, (ValueArg(_value(t), t._aval),), {"shape": (0,)})
    _swap_meta(t, (0,), t._aval[1])
    t._xb = None
    t._aval = ((0,), t._aval[1])
    t._v = (node, 0)
    t._gen = getattr(t, "_gen", 0) + 1
    t._last_data = None
    tensor.pending.append(tensor._ref(t))
    return t


def _resize_meta(x, *, shape):
    return torch.empty(shape, dtype=x.dtype, device="meta")


def _resize_lowering(x, *, shape):
    n = int(np.prod(shape))
    flat = x.reshape(-1)
    if flat.shape[0] >= n:
        flat = flat[:n]
    else:
        flat = jnp.concatenate([flat, jnp.zeros((n - flat.shape[0],), x.dtype)])
    return flat.reshape(shape)


_RESIZE = OpInfo("resize_", None, _resize_lowering, meta=_resize_meta)


def resize(t, size):
    """resize_ of a base tensor: keeps the leading elements (row-major), new ones are 0."""
    size = tuple(int(s) for s in size)
    if size == tuple(t._aval[0]):
        return t
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    if t._xb is not None:
        raise RuntimeError(
            f"torch_xla: resize_ of a view (shape {list(t.shape)} -> {list(size)}) is not supported on XLA "
            f"tensors; resize the base tensor or use .reshape()/.clone()")
    node, _ = trace_node(_RESIZE, (ValueArg(_value(t), t._aval),), {"shape": size})
    _swap_meta(t, size, t._aval[1])
    t._aval = (size, t._aval[1])
    old = t._v
    t._v = (node, 0)
    t._gen += 1
    t._last_data = old[0] if old[0].kind == ir.DATA else None
    tensor.pending.append(tensor._ref(t))
    return t


def resize_out(o, shape, opname):
    """An out= tensor of the wrong shape is resized, as PyTorch does (warning when it had elements)."""
    if o.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(o.shape)}, which does "
            f"not match the required output shape {list(shape)}. (aten::{opname})", UserWarning, stacklevel=4)
    resize(o, shape)
