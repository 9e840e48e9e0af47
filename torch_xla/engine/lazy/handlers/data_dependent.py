"""Ops whose output shape depends on tensor values.

XLA compiles static shapes, so these ops read what they need back to the
host (one counted barrier: the counter names match upstream's CPU
fallbacks, e.g. `aten::nonzero`) and upload the data-dependent part; the
rest of the computation stays lazy on the device:

  nonzero / argwhere / where(cond)   the condition is read, indices uploaded
  x[mask]                            the mask is read (aten::nonzero), the
                                     gather stays on the device
  masked_select                      likewise (aten::masked_select)
  x[mask] = v                        on the device, no read, for a leading mask
                                     or one value; else indices as for x[mask]
  unique family                      read, run on the host, uploaded
  nonzero_static                     fully on the device (static size)

`.item()`, `bool(t)` and `if t:` live in transfers.py (aten::_local_scalar_dense).
"""
import jax.numpy as jnp
import torch

from ...base import metrics
from ...ops import checks
from ...ops.registry import handler, lower
from ..tensor import XLATensor, new_base
from ..tracing import meta_arg, op_info, trace_node, wrap
from ..transfers import to_cpu as _to_cpu
from ..transfers import upload_node
from ..views import broadcast_error

aten = torch.ops.aten


def _upload(cpu):
    return new_base((upload_node(cpu), 0), (tuple(cpu.shape), cpu.dtype))


def _xla(t):
    return isinstance(t, XLATensor)


def _lazy(func, args, kwargs=None):
    """Run func through the ordinary (lowering) path, skipping the handlers here."""
    node, e = trace_node(op_info(func), args, kwargs or {})
    return wrap(node, e)


def _cpu_index(i):
    """A CPU index tensor of an XLA tensor (PyTorch accepts them): uploaded."""
    return isinstance(i, torch.Tensor) and not _xla(i) and i.dim() != 0


def _is_mask(i):
    return isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)


def _host_nonzero(mask, counter="aten::nonzero"):
    """-> CPU int64 (n, ndim) indices of mask's True elements (reads mask)."""
    metrics.counter(counter)
    m = _to_cpu(mask) if _xla(mask) else mask
    return torch.nonzero(m)


def _expand_masks(indices, counter="aten::nonzero"):
    """Replace each boolean mask in an index list by one int64 index tensor per
    dimension it covers (as PyTorch does), uploaded to the device."""
    out = []
    for i in indices:
        if _is_mask(i):
            if i.dtype == torch.uint8:
                i = i.bool() if not _xla(i) else _lazy(aten._to_copy.default, (i,), {"dtype": torch.bool})
            nz = _host_nonzero(i, counter)
            for d in range(i.dim()):
                out.append(_upload(nz[:, d].contiguous()))
        elif isinstance(i, torch.Tensor) and not _xla(i) and i.dim() != 0:
            out.append(_upload(i))
        else:
            out.append(i)
    return out


# -- nonzero ------------------------------------------------------------------

@handler("nonzero.default")
def _nonzero(args, kwargs):
    return _upload(_host_nonzero(args[0]))


@handler("nonzero_numpy.default")
def _nonzero_numpy(args, kwargs):
    nz = _host_nonzero(args[0])
    return [_upload(nz[:, d].contiguous()) for d in range(nz.shape[1])]


@lower("nonzero_static")
def _nonzero_static(x, *, size, fill_value=-1):
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    idx = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(idx, axis=1).astype(jnp.int64)


# -- boolean-mask indexing ------------------------------------------------------

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _check_index_dtypes(indices):
    for i in indices:
        if isinstance(i, torch.Tensor) and i.dtype not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


@handler("index.Tensor")
def _index(args, kwargs):
    x, indices = args[0], list(args[1])
    _check_index_dtypes(indices)
    if any(_is_mask(i) or _cpu_index(i) for i in indices):
        indices = _expand_masks(indices)
    return _lazy(aten.index.Tensor, (x, indices))


@handler("masked_select.default")
def _masked_select(args, kwargs):
    x, mask = args[0], args[1]
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    if tuple(x.shape) != tuple(shape):
        x = _lazy(aten.expand.default, (x, list(shape)))
    if tuple(mask.shape) != tuple(shape):
        mask = mask.expand(shape)
    nz = _host_nonzero(mask, "aten::masked_select")
    idx = [_upload(nz[:, d].contiguous()) for d in range(len(shape))]
    if not shape:  # 0-dim: zero or one element
        flat = _lazy(aten.reshape.default, (x, [1]))
        return _lazy(aten.index.Tensor, (flat, [_upload(torch.zeros(nz.shape[0], dtype=torch.int64))]))
    return _lazy(aten.index.Tensor, (x, idx))


def _put_shape_error(values, result):
    return RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast "
                        f"to indexing result of shape {list(result)}")


def _put_dtype_error(x, values):
    return RuntimeError(f"Index put requires the source and destination dtypes match, got "
                        f"{checks.scalar_type_name(x.dtype)} for the destination and "
                        f"{checks.scalar_type_name(values.dtype)} for the source.")


def _check_put(x, indices, values):
    """Eager's checks of x[indices] = values (no mask left in indices) that no
    meta kernel makes: the values broadcast to the indexing result, then they
    have x's dtype."""
    if not isinstance(values, torch.Tensor):
        return
    try:
        result = torch.ops.aten.index.Tensor(meta_arg(x), [meta_arg(i) for i in indices])
    except Exception:  # noqa: BLE001  (a bad index: the op itself says so)
        return
    if broadcast_error(result.shape, values.shape) is not None:
        raise _put_shape_error(values, result.shape)
    if values.dtype != x.dtype:
        raise _put_dtype_error(x, values)


def _check_leading_mask_put(x, mask, values):
    """_check_put for x[mask] = values, the mask unread: the indexing result is
    [number of True] + x's shape past the mask. Where no count of True makes
    the values fit, the mask is read for eager's message."""
    rest = tuple(x.shape[mask.dim():])
    v = tuple(values.shape)
    bad = len(v) > len(rest) + 1 or broadcast_error(rest, v[len(v) - min(len(v), len(rest)):]) is not None
    if bad:
        n = _host_nonzero(mask).shape[0]
        raise _put_shape_error(values, (n,) + rest)
    if values.dtype != x.dtype:
        raise _put_dtype_error(x, values)


def _index_put_common(args, kwargs):
    x, indices, values = args[0], list(args[1]), args[2]
    _check_index_dtypes([i for i in indices if i is not None])
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    masks = [k for k, i in enumerate(indices) if _is_mask(i)]
    if not masks:
        if any(_cpu_index(i) for i in indices):
            indices = _expand_masks(indices)
        _check_put(x, indices, values)
        return None, x, indices, values, accumulate
    # one mask and one value: eager fills through the mask (masked_fill_), any dtype
    fill = not accumulate and values.numel() == 1 and len([i for i in indices if i is not None]) == 1
    if masks == [0] and all(i is None for i in indices[1:]) and _xla(indices[0]) \
            and indices[0].dtype == torch.bool:
        # a leading mask: the index_put rule writes in order of the True
        # positions (cumsum ranks) on the device, no host read
        if not fill:
            _check_leading_mask_put(x, indices[0], values)
        return None, x, indices, values, accumulate
    if len(masks) == 1 and all(i is None for k, i in enumerate(indices) if k != masks[0]) \
            and values.numel() == 1 and _xla(indices[masks[0]]):
        # one mask and one value: a where() on the device, no host read
        if values.dtype != x.dtype:   # eager refuses most mixes ("Index put requires ...")
            checks.probe(aten.index_put.default, (x, indices, values, accumulate), {}, fill=0)
        k = masks[0]
        m = indices[k]
        if m.dtype != torch.bool:
            m = _lazy(aten._to_copy.default, (m,), {"dtype": torch.bool})
        lead = sum(1 for i in indices[:k])  # dims before the mask
        shape = [1] * lead + list(m.shape) + [1] * (x.dim() - lead - m.dim())
        m = _lazy(aten.view.default, (m, shape))
        v = values if _xla(values) else _upload(values)
        v = _lazy(aten.reshape.default, (v, []))
        if accumulate:
            v = _lazy(aten.add.Tensor, (x, v))
        if v.dtype != x.dtype:
            v = _lazy(aten._to_copy.default, (v,), {"dtype": x.dtype})
        return _lazy(aten.where.self, (m, v, x)), None, None, None, None
    indices = _expand_masks(indices)
    if not fill:
        _check_put(x, indices, values)
    return None, x, indices, values, accumulate


@handler("index_put.default")
def _index_put(args, kwargs):
    done, x, indices, values, acc = _index_put_common(args, kwargs)
    if done is not None:
        return done
    return _lazy(aten.index_put.default, (x, indices, values, acc))


@handler("_index_put_impl.default")
def _index_put_impl(args, kwargs):
    done, x, indices, values, acc = _index_put_common(args, kwargs)
    if done is not None:
        return done
    unsafe = args[4] if len(args) > 4 else kwargs.get("unsafe", False)
    return _lazy(aten._index_put_impl.default, (x, indices, values, acc, unsafe))


# -- unique: on the host ----------------------------------------------------------

def _host_op(func, counter):
    def h(args, kwargs):
        metrics.counter(counter)
        cargs = [_to_cpu(a) if _xla(a) else a for a in args]
        out = func(*cargs, **kwargs)
        if isinstance(out, torch.Tensor):
            return _upload(out)
        return type(out)(_upload(o) for o in out)
    return h


for _name in ("_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive"):
    _packet = getattr(aten, _name, None)
    if _packet is not None:
        handler(_name + ".default")(_host_op(_packet.default, f"aten::{_name}"))
