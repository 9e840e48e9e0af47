"""Shape, view and indexing rules: views, cat/stack, index/index_put,
gather/scatter, padding, flips and rolls."""
import jax.numpy as jnp
import numpy as np
from jax import lax

from .context import out_dtype, out_shape
from .registry import ctx, lower, vjp_of




# -- views (also used to re-derive views from their base) ------------------

@lower("view", "view_copy", "_unsafe_view", "_reshape_alias", "_reshape_alias_copy", "reshape",
       "expand", "expand_copy", "broadcast_to", "view.dtype")
def _reshape_like(x, *args, **kwargs):
    shape = out_shape()
    if args and not isinstance(args[0], (list, tuple)) and not isinstance(args[0], int):
        # view.dtype: reinterpret bits
        return lax.bitcast_convert_type(x, out_dtype()) if x.dtype.itemsize == out_dtype().itemsize else x.view(out_dtype())
    if int(np.prod(shape)) == x.size and ctx.entry.name.split(".")[0] not in ("expand", "expand_copy", "broadcast_to"):
        return jnp.reshape(x, shape)
    return jnp.broadcast_to(x, shape)


@lower("permute", "permute_copy")
def _permute(x, dims):
    return jnp.transpose(x, [d % max(x.ndim, 1) for d in dims]) if x.ndim else x


@lower("transpose.int", "transpose_copy.int")
def _transpose(x, d0, d1):
    if x.ndim < 2:
        return x
    return jnp.swapaxes(x, d0, d1)


@lower("t", "t_copy", "numpy_T", "mT", "adjoint")
def _t(x):
    return x.T if x.ndim == 2 else x


def _index_in(index, n):
    """A select's index as a position 0..n-1 (eager counts a negative one from the end)."""
    return index % n if index < 0 else index


@lower("select.int", "select_copy.int")
def _select(x, dim, index):
    d = dim % x.ndim
    i = _index_in(index, x.shape[d])
    return lax.index_in_dim(x, i, axis=d, keepdims=False)


@lower("slice.Tensor", "slice_copy.Tensor")
def _slice(x, dim=0, start=None, end=None, step=1):
    d = dim % x.ndim
    start, end = _slice_bounds(x.shape[d], start, end)
    return lax.slice_in_dim(x, start, end, step, axis=d)


def _slice_bounds(n, start, end):
    """eager's clamping of a slice's start and end into 0..n."""
    start = 0 if start is None else start
    end = n if end is None else end
    if start < 0:
        start += n
    if end < 0:
        end += n
    start = min(max(start, 0), n)
    return start, min(max(end, start), n)


def _put_slice(x, src, d, start, end, step):
    src = src.astype(x.dtype)
    if step == 1:
        return lax.dynamic_update_slice_in_dim(x, src, start, axis=d)
    return x.at[(slice(None),) * d + (slice(start, end, step),)].set(src)


# the scatters and view backwards as single rules: PyTorch's decompositions of
# them trace five to ten ops each (an attention block's select_backward and
# slice_backward cost 80-170 us a call that way)
@lower("select_scatter")
def _select_scatter(x, src, dim, index):
    d = dim % x.ndim
    i = _index_in(index, x.shape[d])
    return lax.dynamic_update_index_in_dim(x, src.astype(x.dtype), i, axis=d)


@lower("select_backward")
def _select_backward(grad, input_sizes, dim, index):
    d = dim % len(input_sizes)
    i = _index_in(index, input_sizes[d])
    return lax.dynamic_update_index_in_dim(jnp.zeros(tuple(input_sizes), out_dtype()), grad.astype(out_dtype()),
                                           i, axis=d)


@lower("slice_scatter")
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    d = dim % x.ndim
    start, end = _slice_bounds(x.shape[d], start, end)
    return _put_slice(x, src, d, start, end, step)


@lower("slice_backward")
def _slice_backward(grad, input_sizes, dim, start, end, step):
    d = dim % len(input_sizes)
    start, end = _slice_bounds(input_sizes[d], start, end)
    return _put_slice(jnp.zeros(tuple(input_sizes), out_dtype()), grad, d, start, end, step)


@lower("narrow", "narrow_copy")
def _narrow(x, dim, start, length):
    d = dim % x.ndim
    s = start % x.shape[d] if start < 0 else start
    return lax.slice_in_dim(x, s, s + length, 1, axis=d)


@lower("squeeze", "squeeze.dim", "squeeze.dims", "squeeze_copy", "squeeze_copy.dim", "squeeze_copy.dims",
       "unsqueeze", "unsqueeze_copy", "flatten.using_ints", "unflatten.int", "_unsafe_view", "view_as")
def _reshape(x, *args, **kwargs):
    return jnp.reshape(x, out_shape())


@lower("diagonal", "diagonal_copy")
def _diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, dim1 % x.ndim, dim2 % x.ndim)


@lower("unfold", "unfold_copy")
def _unfold(x, dim, size, step):
    if x.ndim == 0:
        return jnp.broadcast_to(x, out_shape())   # (1,), or (0,) for size 0
    d = dim % x.ndim
    n = (x.shape[d] - size) // step + 1
    starts = np.arange(n) * step
    idx = starts[:, None] + np.arange(size)[None, :]
    taken = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=d)
    shp = list(x.shape)
    shp[d:d + 1] = [n, size]
    taken = taken.reshape(shp)
    return jnp.moveaxis(taken, d + 1, -1)


@lower("split.Tensor", "split_copy.Tensor", "split_with_sizes", "split_with_sizes_copy", "unsafe_split.Tensor",
       "unsafe_split_with_sizes", "tensor_split.sections", "tensor_split.indices")
def _split(x, split, dim=0):
    d = dim % x.ndim
    out = []
    start = 0
    for shape, _ in ctx.entry.out_avals:
        n = shape[d]
        out.append(lax.slice_in_dim(x, start, start + n, 1, axis=d))
        start += n
    return out


@lower("unbind.int", "unbind_copy.int")
def _unbind(x, dim=0):
    d = dim % x.ndim
    return [lax.index_in_dim(x, i, axis=d, keepdims=False) for i in range(x.shape[d])]


@lower("chunk")
def _chunk(x, chunks, dim=0):
    return _split(x, chunks, dim)


def _strided_positions(size, stride, storage_offset):
    """Flat storage position of every element of an as_strided view (a constant)."""
    idx = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return idx


def _contiguous_block(size, stride):
    """True when an as_strided view of this size/stride is one contiguous run of
    storage (DDP's gradient bucket views, flat-parameter views): a slice, not a
    gather, so XLA gets no index constant to fold and the backward is a pad."""
    expect = 1
    for n, st in zip(reversed(size), reversed(stride)):
        if n != 1 and st != expect:
            return False
        expect *= n
    return True


@lower("as_strided", "as_strided_copy")
def _as_strided(x, size, stride, storage_offset=None):
    off = storage_offset or 0
    n = int(np.prod(size)) if len(size) else 1
    if _contiguous_block(size, stride) and off + n <= x.size:
        return lax.slice(x.reshape(-1), (off,), (off + n,)).reshape(tuple(size))
    idx = _strided_positions(size, stride, storage_offset)
    flat = x.reshape(-1)
    return jnp.take(flat, jnp.asarray(idx), mode="clip") if idx.size else jnp.zeros(size, x.dtype)


# -- joining, repeating ------------------------------------------------------

@lower("cat")
def _cat(tensors, dim=0):
    dt = out_dtype()
    ts = [t.astype(dt) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not ts:
        return jnp.zeros(out_shape(), dt)
    return jnp.concatenate(ts, axis=dim % ts[0].ndim)


@lower("stack")
def _stack(tensors, dim=0):
    dt = out_dtype()
    return jnp.stack([t.astype(dt) for t in tensors], axis=dim % (tensors[0].ndim + 1))


@lower("flip")
def _flip(x, dims):
    return jnp.flip(x, [d % x.ndim for d in dims]) if x.ndim else x


@lower("roll")
def _roll(x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), shifts).reshape(x.shape)
    return jnp.roll(x, shifts, [d % x.ndim for d in dims])


@lower("repeat")
def _repeat(x, repeats):
    pad = len(repeats) - x.ndim
    x = x.reshape((1,) * pad + x.shape)
    return jnp.tile(x, repeats)


@lower("tril")
def _tril(x, diagonal=0):
    return jnp.tril(x, diagonal)


@lower("triu")
def _triu(x, diagonal=0):
    return jnp.triu(x, diagonal)


@lower("constant_pad_nd")
def _constant_pad(x, pad, value=0):
    cfg = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        cfg[d] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), cfg)


def _pad_mode(mode):
    def rule(x, padding):
        n = len(padding) // 2
        cfg = [(0, 0)] * (x.ndim - n) + [(padding[2 * i], padding[2 * i + 1]) for i in reversed(range(n))]
        if mode == "edge":
            # out[i] = x[clamp(i - lo, 0, n - 1)] (negative pads included)
            for d, (lo, hi) in enumerate(cfg):
                if lo or hi:
                    n_in = x.shape[d]
                    idx = np.clip(np.arange(n_in + lo + hi) - lo, 0, n_in - 1)
                    x = jnp.take(x, jnp.asarray(idx), axis=d)
            return x
        # negative padding crops first
        crop = tuple(slice(max(-lo, 0), x.shape[d] - max(-hi, 0)) for d, (lo, hi) in enumerate(cfg))
        x = x[crop]
        return jnp.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in cfg], mode=mode)
    return rule


for _n, _m in (("reflection_pad1d", "reflect"), ("reflection_pad2d", "reflect"), ("reflection_pad3d", "reflect"),
               ("replication_pad1d", "edge"), ("replication_pad2d", "edge"), ("replication_pad3d", "edge")):
    lower(_n)(_pad_mode(_m))


# -- indexing ----------------------------------------------------------------

def _index_tuple(x, indices):
    idx = []
    for i in indices:
        if i is None:
            idx.append(slice(None))
        elif i.dtype == jnp.bool_:
            raise NotImplementedError("boolean mask index needs a data-dependent shape")
        else:
            idx.append(i)
    return tuple(idx)


@lower("index.Tensor", "_unsafe_index.Tensor")
def _index(x, indices):
    return x[_index_tuple(x, indices)]


@lower("index_put", "_index_put_impl", "_unsafe_index_put")
def _index_put(x, indices, values, accumulate=False, unsafe=False):
    idx = []
    for i in indices:
        if i is None:
            idx.append(slice(None))
        elif i.dtype == jnp.bool_:
            # a boolean mask of the leading dims: write where True
            mask = i
            v = values.astype(x.dtype)
            shape = mask.shape + (1,) * (x.ndim - mask.ndim)
            m = mask.reshape(shape)
            if accumulate:
                return jnp.where(m, x + v, x) if v.ndim == 0 else _mask_put(x, mask, v, accumulate)
            return jnp.where(m, v, x) if v.ndim == 0 else _mask_put(x, mask, v, accumulate)
        else:
            idx.append(i)
    ref = x.at[tuple(idx)]
    v = values.astype(x.dtype)
    if accumulate and x.dtype == jnp.bool_:
        return x.astype(jnp.int32).at[tuple(idx)].add(v.astype(jnp.int32)) != 0
    return ref.add(v) if accumulate else ref.set(v)


def _mask_put(x, mask, v, accumulate):
    # values broadcast over the masked positions in order: cumsum gives each
    # True its rank, which picks its value
    flat_mask = mask.reshape(-1)
    rank = jnp.cumsum(flat_mask) - 1
    rest = x.shape[mask.ndim:]
    vv = jnp.broadcast_to(v, (v.shape[0] if v.ndim > len(rest) else 1,) + rest) if v.ndim else v
    picked = vv[jnp.clip(rank, 0, vv.shape[0] - 1)]
    xf = x.reshape((-1,) + rest)
    m = flat_mask.reshape((-1,) + (1,) * len(rest))
    out = jnp.where(m, xf + picked if accumulate else picked, xf)
    return out.reshape(x.shape)


@lower("index_select")
def _index_select(x, dim, index):
    if x.ndim == 0:
        return jnp.broadcast_to(x, out_shape())
    return jnp.take(x, index, axis=dim % x.ndim, mode="clip")


@lower("gather")
def _gather(x, dim, index, sparse_grad=False):
    if index.size == 0:
        return jnp.zeros(index.shape, x.dtype)   # PyTorch checks no ranks for an empty index
    if x.ndim == 0:
        return x.reshape(index.shape)
    d = dim % x.ndim
    if any(index.shape[i] < x.shape[i] for i in range(x.ndim) if i != d):
        # PyTorch lets the index be smaller than the input off `dim`: only that corner is read
        x = x[tuple(slice(None) if i == d else slice(0, index.shape[i]) for i in range(x.ndim))]
    return jnp.take_along_axis(x, index, axis=d, mode="clip")


def _scatter_idx(x, dim, index):
    d = dim % max(x.ndim, 1)
    grids = np.indices(index.shape, sparse=True)
    return tuple(index if i == d else jnp.asarray(g) for i, g in enumerate(grids))


@lower("scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce")
def _scatter(x, dim, index, src, reduce=None):
    if index.size == 0:
        return x                                 # nothing written (any ranks, as eager)
    if x.ndim == 0:
        return jnp.asarray(src, x.dtype).reshape(()) if not hasattr(src, "shape") else src.reshape(()).astype(x.dtype)
    if hasattr(src, "shape") and src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    src = jnp.broadcast_to(jnp.asarray(src, x.dtype), index.shape)
    ref = x.at[_scatter_idx(x, dim, index)]
    if reduce is None:
        return ref.set(src)
    if reduce in ("add", "sum"):
        return ref.add(src)
    if reduce in ("multiply", "prod"):
        return ref.multiply(src)
    raise NotImplementedError(f"scatter reduce={reduce}")


def _bool_via_int(rule):
    """Run an accumulating rule on 0/1 integers for bool tensors (sum -> or, prod -> and)."""
    def wrapped(x, *args, **kwargs):
        if x.dtype != jnp.bool_:
            return rule(x, *args, **kwargs)
        args = [a.astype(jnp.int32) if hasattr(a, "dtype") and a.dtype == jnp.bool_ else a for a in args]
        kwargs = {k: (v.astype(jnp.int32) if hasattr(v, "dtype") and v.dtype == jnp.bool_ else v)
                  for k, v in kwargs.items()}
        return rule(x.astype(jnp.int32), *args, **kwargs) != 0
    return wrapped


@lower("scatter_add")
@_bool_via_int
def _scatter_add(x, dim, index, src):
    if index.size == 0:
        return x
    if x.ndim == 0:
        return x + src.reshape(())
    src = src[tuple(slice(0, n) for n in index.shape)]
    return x.at[_scatter_idx(x, dim, index)].add(src.astype(x.dtype))


@lower("scatter_reduce.two")
@_bool_via_int
def _scatter_reduce(x, dim, index, src, reduce, include_self=True):
    if index.size == 0:
        return x
    if x.ndim == 0:
        x = x.reshape(1)
        index = index.reshape(1)
        src = src.reshape(1)
        return _scatter_reduce(x, 0, index, src, reduce, include_self).reshape(())
    src = src[tuple(slice(0, n) for n in index.shape)].astype(x.dtype)
    idx = _scatter_idx(x, dim, index)
    if reduce == "sum":
        base = x if include_self else x.at[idx].set(0)
        return base.at[idx].add(src)
    if reduce == "prod":
        base = x if include_self else x.at[idx].set(1)
        return base.at[idx].multiply(src)
    if reduce == "amax":
        base = x if include_self else x.at[idx].set(_lowest(x.dtype))
        return base.at[idx].max(src)
    if reduce == "amin":
        base = x if include_self else x.at[idx].set(_highest(x.dtype))
        return base.at[idx].min(src)
    if reduce == "mean":
        cnt = jnp.zeros(x.shape, x.dtype).at[idx].add(1)
        base = x if include_self else x.at[idx].set(0)
        tot = base.at[idx].add(src)
        n = cnt + (1 if include_self else 0)
        out = tot / jnp.where(n == 0, 1, n) if jnp.issubdtype(x.dtype, jnp.inexact) else tot // jnp.where(n == 0, 1, n)
        return jnp.where(cnt == 0, x, out.astype(x.dtype))
    raise NotImplementedError(reduce)


def _lowest(dt):
    return jnp.finfo(dt).min if jnp.issubdtype(dt, jnp.inexact) else jnp.iinfo(dt).min


def _highest(dt):
    return jnp.finfo(dt).max if jnp.issubdtype(dt, jnp.inexact) else jnp.iinfo(dt).max


@lower("index_add")
@_bool_via_int
def _index_add(x, dim, index, source, alpha=1):
    d = dim % max(x.ndim, 1)
    src = source.astype(x.dtype)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        src = src * jnp.asarray(alpha, x.dtype)
    if x.ndim == 0:
        return x + src.reshape(())
    idx = [slice(None)] * x.ndim
    idx[d] = index
    return x.at[tuple(idx)].add(src)


@lower("index_copy")
def _index_copy(x, dim, index, source):
    d = dim % max(x.ndim, 1)
    if x.ndim == 0:
        return source.reshape(()).astype(x.dtype)
    idx = [slice(None)] * x.ndim
    idx[d] = index
    return x.at[tuple(idx)].set(source.astype(x.dtype))


@lower("index_fill.int_Scalar", "index_fill.int_Tensor")
def _index_fill(x, dim, index, value):
    d = dim % max(x.ndim, 1)
    if x.ndim == 0:
        return jnp.asarray(value, x.dtype).reshape(())
    idx = [slice(None)] * x.ndim
    idx[d] = index
    return x.at[tuple(idx)].set(jnp.asarray(value, x.dtype))


@lower("masked_scatter")
def _masked_scatter(x, mask, source):
    shape = jnp.broadcast_shapes(x.shape, mask.shape)   # either side may broadcast
    x = jnp.broadcast_to(x, shape)
    mask = jnp.broadcast_to(mask, shape).reshape(-1)
    rank = jnp.cumsum(mask) - 1
    src = source.reshape(-1).astype(x.dtype)
    picked = src[jnp.clip(rank, 0, max(src.shape[0] - 1, 0))]
    return jnp.where(mask, picked, x.reshape(-1)).reshape(x.shape)


@lower("embedding")
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0, mode="clip")


@lower("embedding_dense_backward")
def _embedding_bwd(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    d = grad.shape[-1]
    g = grad.reshape(-1, d)
    idx = indices.reshape(-1)
    if padding_idx is not None and padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), g.dtype).at[idx].add(1)
        g = g / counts[idx][:, None]
    return jnp.zeros((num_weights, d), g.dtype).at[idx].add(g)


@lower("take")
def _take(x, index):
    flat = x.reshape(-1)
    index = jnp.where(index < 0, index + flat.shape[0], index)   # take counts from the end as eager does
    return jnp.take(flat, index, mode="clip")


@lower("take_along_dim")
def _take_along_dim(x, indices, dim=None):
    if dim is None:
        return jnp.take(x.reshape(-1), indices.reshape(-1))
    d = dim % x.ndim
    # the two broadcast against each other everywhere but along `dim`
    common = list(jnp.broadcast_shapes(tuple(1 if i == d else n for i, n in enumerate(x.shape)),
                                       tuple(1 if i == d else n for i, n in enumerate(indices.shape))))
    x = jnp.broadcast_to(x, tuple(x.shape[d] if i == d else n for i, n in enumerate(common)))
    indices = jnp.broadcast_to(indices, tuple(indices.shape[d] if i == d else n for i, n in enumerate(common)))
    return jnp.take_along_axis(x, indices, axis=d)


def _pad_mode_backward(mode):
    fwd = _pad_mode(mode)

    def rule(grad, x, padding):
        return vjp_of(lambda y: fwd(y, padding), (x,), grad)[0]
    return rule


for _n, _m in (("reflection_pad1d", "reflect"), ("reflection_pad2d", "reflect"), ("reflection_pad3d", "reflect"),
               ("replication_pad1d", "edge"), ("replication_pad2d", "edge"), ("replication_pad3d", "edge")):
    lower(_n + "_backward")(_pad_mode_backward(_m))


@lower("put")
def _put(x, index, source, accumulate=False):
    flat = x.reshape(-1)
    idx = index.reshape(-1)
    idx = jnp.where(idx < 0, idx + flat.shape[0], idx)
    src = source.reshape(-1).astype(x.dtype)
    if accumulate:
        if x.dtype == jnp.bool_:
            return (flat.astype(jnp.int32).at[idx].add(src.astype(jnp.int32)) != 0).reshape(x.shape)
        return flat.at[idx].add(src).reshape(x.shape)
    return flat.at[idx].set(src).reshape(x.shape)


@lower("as_strided_scatter")
def _as_strided_scatter(x, src, size, stride, storage_offset=None):
    off = storage_offset or 0
    n = int(np.prod(size)) if len(size) else 1
    if _contiguous_block(size, stride) and off + n <= x.size:
        flat = lax.dynamic_update_slice(x.reshape(-1), src.reshape(-1).astype(x.dtype), (off,))
        return flat.reshape(x.shape)
    idx = _strided_positions(size, stride, storage_offset)
    flat = x.reshape(-1)
    return flat.at[jnp.asarray(idx.reshape(-1))].set(src.reshape(-1).astype(x.dtype)).reshape(x.shape)


@lower("masked_scatter_backward")
def _masked_scatter_backward(grad, mask, sizes):
    n = int(np.prod(sizes))
    m = jnp.broadcast_to(mask, grad.shape).reshape(-1)
    g = grad.reshape(-1)
    rank = jnp.cumsum(m) - 1
    out = jnp.zeros((n,), grad.dtype)
    # grad values at masked positions go to the source slot of their rank
    tgt = jnp.where(m, rank, n)
    out = jnp.zeros((n + 1,), grad.dtype).at[tgt].add(jnp.where(m, g, 0))[:n]
    return out.reshape(tuple(sizes))


@lower("index_reduce")
def _index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if x.ndim == 0:
        return _scatter_reduce(x, 0, index.reshape(()), source.reshape(()), reduce, include_self)
    d = dim % x.ndim
    shape = [1] * source.ndim
    shape[d] = source.shape[d]
    full = jnp.broadcast_to(index.reshape(shape), source.shape)
    return _scatter_reduce(x, d, full, source, reduce, include_self)
