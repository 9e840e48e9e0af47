"""Aliasing: views of a base and mutation through either.

A view reads a `state.Base` through a chain of view steps (the OpEntry of each
aten view op at its input's aval, and which output it took). Reading a view
re-applies the chain to the base's current value when the base changed since
the view's value was cached. Writing a view scatters the new value back
through the chain into a new base value, so the base and every other view see
it. An in-place view op (`t_`, `unsqueeze_`, `as_strided_`, ...) makes its
tensor a view of the storage it read, so other views of that storage keep
their own layout, as in eager PyTorch.

Views report the strides and storage offset they have in eager PyTorch
(from the view op's meta kernel on an input of the same layout), so
`is_contiguous()`, `.contiguous()` and `reshape` copy exactly when eager
copies. `as_strided` is taken relative to the base's storage, as PyTorch
takes it relative to the storage.
"""
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..base.dtypes import to_jax
from ..base.frames import where
from ..ir import node as ir
from ..ops.numerics import cast
from ..ops.registry import lower
from . import state
from .state import Base, View, apply_step, value_of
from .tensor import XLATensor, new_view
from .tracing import OpInfo, ValueArg, apply_entry, op_info, trace_node


_GEOM = {}


def _contiguous_strides(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))


def _geometry(info, entry, layout, aval, args, kwargs):
    """(strides, storage_offset) of each output of a view op, as eager PyTorch
    lays them out (None where contiguous at offset 0), from the op's meta
    kernel on an input of `aval` with `layout` ((strides, offset); None for a
    base, which holds its value contiguous at offset 0). Memoised per entry
    and input layout."""
    shape, dtype = aval
    key = entry if layout is None else (entry, layout[0], layout[1])
    got = _GEOM.get(key)
    if got is not None:
        return got
    stride, off = (_contiguous_strides(shape), 0) if layout is None else layout
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
            raise NotImplementedError(f"torch_xla: view op aten::{info.name} has no lowering (at {where()})")
        return missing
    as_strided = info.name.split(".")[0] == "as_strided"

    def handler(args, kwargs):
        src = args[0]
        s = src._lazy
        if type(s) is Base:
            base, chain, layout = s, (), None
        elif as_strided:
            # relative to the storage, i.e. the base
            args = list(args)
            off = args[3] if len(args) > 3 else kwargs.pop("storage_offset", None)
            if off is None:
                off = src.storage_offset()
            base = s.base
            args = (ValueArg(base.value, base.aval), args[1], args[2], off)
            s, chain, layout = base, (), None
        else:
            base, chain, layout = s.base, s.chain, (tuple(src.stride()), src.storage_offset())
        node, entry = trace_node(info, args, kwargs)
        gen = base.gen
        geom = _geometry(info, entry, layout, s.aval, args, kwargs)
        if entry.out_struct is None:
            return new_view(base, chain + ((entry, 0),), entry.out_avals[0], (node, 0), gen, geom[0])
        typ, struct = entry.out_struct
        return typ(new_view(base, chain + ((entry, i),), entry.out_avals[i], (node, i), gen, geom[i])
                   for i in range(len(entry.out_avals)))
    return handler


def geometry_of(t):
    """t's (strides, storage offset), or None when contiguous at offset 0."""
    g = (tuple(t.stride()), t.storage_offset())
    return None if g == (_contiguous_strides(tuple(t.shape)), 0) else g


def alias(t):
    """detach/alias: a new tensor object on the same storage."""
    s = t._lazy
    if type(s) is Base:
        return new_view(s, (), s.aval, s.value, s.gen)
    return new_view(s.base, s.chain, s.aval, s.current(), s.base.gen, geometry_of(t))


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


def _check_no_overlap(view):
    """PyTorch refuses writes into views where elements share memory (expand,
    overlapping unfold); so do we."""
    for entry, _ in view.chain:
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
            dim = entry.template[1]
            shape = entry.in_avals[0][0]
            length = shape[dim] if shape else 1
            windows = (length - size) // step + 1 if isinstance(step, int) and step > 0 else 0
            if isinstance(size, int) and isinstance(step, int) and step < size and windows > 1:
                raise RuntimeError(_OVERLAP_MSG)   # two windows share elements


_SCATTER = OpInfo("view_scatter", None, _scatter_lowering, meta=_scatter_meta)

_PARTIAL_MSG = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to "
                "a single memory location. Please clone() the tensor before performing the operation.")


def check_partial_overlap(target, operands):
    """Eager PyTorch refuses an in-place op whose operand shares part, but not
    all, of the target's memory (`v.view(1).sub_(v)` for a 0-dim v); so do we.
    Memory is the Base both read; extents come from the eager layout views
    report, compared only for dense layouts, as eager does."""
    ts = target._lazy
    tb = ts if type(ts) is Base else ts.base
    for a in operands:
        if type(a) is not XLATensor or a is target:
            continue
        s = a._lazy
        if (s if type(s) is Base else s.base) is tb and _partial_overlap(target, a):
            raise RuntimeError(_PARTIAL_MSG)


def _extent(t):
    """(first byte, end byte, strides) of a dense, non-overlapping t in its storage; None otherwise."""
    shape, strides = tuple(t.shape), tuple(t.stride())
    if t.numel() == 0:
        return None
    expected = 1   # dense: the strides, smallest first, pack the sizes with no gap
    for stride, n in sorted((st, n) for n, st in zip(shape, strides) if n != 1):
        if stride != expected:
            return None
        expected *= n
    size = t.element_size()
    begin = t.storage_offset() * size
    return begin, begin + t.numel() * size, strides


def _partial_overlap(a, b):
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None:
        return False
    if ea[:2] == eb[:2]:
        return ea[2] != eb[2]
    return ea[0] < eb[1] and eb[0] < ea[1]


def assign(t, v, fresh=False):
    """Make IR value v (of t's aval) the new value of tensor t, a base or a view
    (a view scatters it back into its base). A device-data value that another
    tensor may hold too (fresh=False) is marked shared, so that a later barrier
    never donates its buffer."""
    if v[0].kind == ir.DATA and not fresh:
        v[0].exclusive = False
    s = t._lazy
    if type(s) is Base:
        s.write(v)
        return
    base = s.base
    if not s.chain:   # an alias of the whole base (a Parameter after .to())
        base.write(v)
        s.written(v)
        return
    _check_no_overlap(s)
    # through the chain: parents[i] is the input of chain step i
    parents = []
    pv, paval = base.value, base.aval
    for step in s.chain:
        parents.append((pv, paval))
        pv, paval = apply_step(step, pv), step[0].out_avals[step[1]]
    cur, caval = v, s.aval
    for step, (pv, paval) in zip(reversed(s.chain), reversed(parents)):
        node, _ = trace_node(_SCATTER, (ValueArg(pv, paval), ValueArg(cur, caval)), {"step": step})
        cur, caval = (node, 0), paval
    base.write(cur)
    s.written(v)


# ---------------------------------------------------------------------------
# writing one tensor's value into another, with a cast

def _convert_meta(x, *, shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def _convert_lowering(x, *, shape, dtype):
    target = to_jax(dtype)
    if jnp.iscomplexobj(x) and not jnp.issubdtype(target, jnp.complexfloating) and target != jnp.bool_:
        x = jnp.real(x)   # PyTorch keeps the real part (with its own warning); JAX's cast is deprecated
        #                   (bool: either part, as eager's static_cast<bool> of a complex)
    return jnp.broadcast_to(cast(x, target), shape)


_CONVERT = OpInfo("_to_copy", None, _convert_lowering, meta=_convert_meta)


def cast_to(v, from_aval, to_aval):
    """IR value v (of from_aval) converted and broadcast to to_aval."""
    node, _ = trace_node(_CONVERT, (ValueArg(v, from_aval),), {"shape": to_aval[0], "dtype": to_aval[1]})
    return (node, 0)


def broadcast_error(out_shape, shape):
    """The RuntimeError eager raises (in TensorIterator's words) when a value of
    `shape` is written into a tensor of `out_shape`, or None where it broadcasts."""
    out_shape, shape = tuple(out_shape), tuple(shape)
    if out_shape == shape:
        return None
    n = max(len(out_shape), len(shape))
    a = (1,) * (n - len(out_shape)) + out_shape
    b = (1,) * (n - len(shape)) + shape
    for i in range(n - 1, -1, -1):   # eager reports the last dim that disagrees
        if a[i] != b[i] and a[i] != 1 and b[i] != 1:
            return RuntimeError(f"The size of tensor a ({a[i]}) must match the size of tensor b ({b[i]}) "
                                f"at non-singleton dimension {i}")
    full = [y if x == 1 else x for x, y in zip(a, b)]
    if tuple(full) != out_shape:
        return RuntimeError(f"output with shape {list(out_shape)} doesn't match the broadcast shape {full}")
    return None


def check_broadcast(out_shape, shape, op):
    """Refuse, as eager does, writing a value of `shape` into a tensor of `out_shape`."""
    if out_shape != shape:
        err = broadcast_error(out_shape, shape)
        if err is not None:
            raise RuntimeError(f"{err}\n  [torch_xla] in aten::{op} at {where()}")


def assign_result(target, result, op="copy_"):
    """Write XLA tensor `result` into `target` (cast/broadcast to target's aval)."""
    v = value_of(result)
    ra, ta = result._lazy.aval, target._lazy.aval
    if ra != ta:
        check_broadcast(ta[0], ra[0], op)
        v = cast_to(v, ra, ta)
    assign(target, v)


# ---------------------------------------------------------------------------
# changing what a tensor reads: in-place view ops, set_, resize_

def _swap_meta(t, shape, dtype, geom=None):
    """Give the PyTorch-visible tensor t a new shape/dtype (its Python state is
    kept: only sizes, strides and dtype are copied from a fresh wrapper)."""
    if geom is None:
        fresh = torch.Tensor._make_wrapper_subclass(type(t), shape, dtype=dtype, device=t.device)
    else:
        fresh = torch.Tensor._make_wrapper_subclass(type(t), shape, strides=geom[0], storage_offset=geom[1],
                                                    dtype=dtype, device=t.device)
    torch._C.TensorBase.data.__set__(t, fresh)


def take_view(t, nv):
    """An in-place view op (t_, transpose_, squeeze_, unsqueeze_, as_strided_, ...):
    t becomes the view nv of the storage it read (nv's metadata through .data,
    which PyTorch does not dispatch). Other views of that storage keep theirs."""
    torch._C.TensorBase.data.__set__(t, nv)
    state.share(t, nv)
    return t


def alias_of(t, source):
    """set_(source): t (base or view) becomes another name for source's storage."""
    if t is source:
        return t
    s = source._lazy
    _swap_meta(t, s.aval[0], s.aval[1], geometry_of(source) if type(s) is View else None)
    state.share(t, source)
    return t


def set_empty(t):
    """set_(): t becomes an empty tensor with storage of its own."""
    aval = t._lazy.aval
    node, _ = trace_node(_RESIZE, (ValueArg(value_of(t), aval),), {"shape": (0,)})
    _swap_meta(t, (0,), aval[1])
    state.make_base(t, (node, 0), ((0,), aval[1]), state.base_of(t).device)
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
    """resize_: keeps the leading elements (row-major), new ones are 0. A view, and a
    tensor whose storage something else reads and that still fits it, are seen anew
    on that storage (`_resize_view`); any other tensor gets storage of its own."""
    size = tuple(int(s) for s in size)
    shared = state.storage_shared(t)   # asked first: this frame holds no reference to the Base yet
    s = t._lazy
    if size == tuple(s.aval[0]):
        return t
    if any(n < 0 for n in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    if type(s) is View and s.chain:
        return _resize_view(t, s.base, t.storage_offset(), size)
    base = state.base_of(t)
    if shared and math.prod(size) <= math.prod(base.aval[0]):
        # eager keeps a storage large enough, and its other readers see later writes
        return _resize_view(t, base, 0, size)
    # a base, or an alias of a whole base (`torch.tensor(data, device=...)` makes one,
    # where eager makes a tensor of its own), that nothing else reads or that grows:
    # storage of its own, of the new size
    node, _ = trace_node(_RESIZE, (ValueArg(value_of(t), s.aval),), {"shape": size})
    _swap_meta(t, size, s.aval[1])
    state.make_base(t, (node, 0), (size, s.aval[1]), base.device)
    return t


def _resize_view(t, base, offset, size):
    """resize_ of a view (or of a tensor whose storage something else reads), as
    eager: the same storage seen with `size` contiguous from `offset` (an
    as_strided of its Base). A view that would need more than its storage holds
    is refused: eager grows the storage under every tensor that shares it, which
    a Base of fixed aval cannot."""
    numel = math.prod(size)
    if offset + numel > math.prod(base.aval[0]):
        raise RuntimeError(
            f"torch_xla: resize_ of a view (shape {list(t.shape)} -> {list(size)}) beyond its storage "
            f"({math.prod(base.aval[0])} elements from offset {offset}) is not supported on XLA tensors; "
            "resize the base tensor or use .reshape()/.clone()")
    strides = _contiguous_strides(size)
    node, entry = trace_node(op_info(torch.ops.aten.as_strided.default),
                             (ValueArg(base.value, base.aval), list(size), list(strides), offset), {})
    geom = None if offset == 0 else (strides, offset)
    _swap_meta(t, size, t._lazy.aval[1], geom)
    state.make_view(t, base, ((entry, 0),), entry.out_avals[0], (node, 0), base.gen)
    return t


def resize_out(o, shape, opname):
    """An out= tensor of the wrong shape is resized, as PyTorch does (warning when it had elements)."""
    if o.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(o.shape)}, which does "
            f"not match the required output shape {list(shape)}. (aten::{opname})", UserWarning, stacklevel=4)
    resize(o, shape)
