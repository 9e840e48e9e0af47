"""Reductions, softmax families and cumulative ops."""
import jax
import jax.numpy as jnp
import torch
from jax import lax

from .registry import ctx, lower, meta


def _od(i=0):
    return ctx.entry.out_dtype(i)


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = (dim,)
    if x.ndim == 0:
        return None
    return tuple(d % x.ndim for d in dim)


@lower("sum", "sum.dim_IntList")
def _sum(x, dim=None, keepdim=False, *, dtype=None):
    dt = _od()
    return jnp.sum(x.astype(dt), axis=_dims(x, dim), keepdims=keepdim)


@lower("mean", "mean.dim")
def _mean(x, dim=None, keepdim=False, *, dtype=None):
    dt = _od()
    return jnp.mean(x.astype(dt), axis=_dims(x, dim), keepdims=keepdim)


@lower("prod", "prod.dim_int")
def _prod(x, dim=None, keepdim=False, *, dtype=None):
    dt = _od()
    return jnp.prod(x.astype(dt), axis=_dims(x, dim), keepdims=keepdim)


@lower("amax")
def _amax(x, dim=(), keepdim=False):
    return jnp.max(x, axis=_dims(x, dim), keepdims=keepdim)


@lower("amin")
def _amin(x, dim=(), keepdim=False):
    return jnp.min(x, axis=_dims(x, dim), keepdims=keepdim)


@lower("max")
def _max_all(x):
    return jnp.max(x)


@lower("min")
def _min_all(x):
    return jnp.min(x)


def _full_reduction_meta(name):
    def shape_fn(x):
        # eager's check: a full max/min of nothing has no value
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return torch.empty((), dtype=x.dtype, device="meta")
    return shape_fn


meta("max.default")(_full_reduction_meta("max"))
meta("min.default")(_full_reduction_meta("min"))


def _arg(fn, x, dim, keepdim):
    if dim is None:
        return fn(x.reshape(-1)).reshape((1,) * x.ndim if keepdim else ())
    if x.ndim == 0:
        return jnp.zeros((), jnp.int64)
    return fn(x, axis=dim % x.ndim, keepdims=keepdim)


@lower("max.dim")
def _max_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.max(x, axis=dim % x.ndim, keepdims=keepdim), _argmax_nan(x, dim, keepdim)


@lower("min.dim")
def _min_dim(x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.min(x, axis=dim % x.ndim, keepdims=keepdim), _argmin_nan(x, dim, keepdim)


def _argmax_nan(x, dim, keepdim):
    return _arg(jnp.argmax, x, dim, keepdim).astype(jnp.int64)


def _argmin_nan(x, dim, keepdim):
    return _arg(jnp.argmin, x, dim, keepdim).astype(jnp.int64)


@lower("argmax")
def _argmax(x, dim=None, keepdim=False):
    return _argmax_nan(x, dim, keepdim)


@lower("argmin")
def _argmin(x, dim=None, keepdim=False):
    return _argmin_nan(x, dim, keepdim)


@lower("any", "any.dim", "any.dims")
def _any(x, dim=None, keepdim=False):
    return jnp.any(x != 0 if x.dtype != jnp.bool_ else x, axis=_dims(x, dim), keepdims=keepdim).astype(_od())


@lower("all", "all.dim", "all.dims")
def _all(x, dim=None, keepdim=False):
    return jnp.all(x != 0 if x.dtype != jnp.bool_ else x, axis=_dims(x, dim), keepdims=keepdim).astype(_od())


def _correction(correction, unbiased):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


@lower("var.correction", "var.dim", "var")
def _var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return jnp.var(x, axis=_dims(x, dim), ddof=_correction(correction, unbiased), keepdims=keepdim).astype(_od())


@lower("std.correction", "std.dim", "std")
def _std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return jnp.std(x, axis=_dims(x, dim), ddof=_correction(correction, unbiased), keepdims=keepdim).astype(_od())


@lower("var_mean.correction")
def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    ax = _dims(x, dim)
    return (jnp.var(x, axis=ax, ddof=_correction(correction, None), keepdims=keepdim).astype(_od(0)),
            jnp.mean(x, axis=ax, keepdims=keepdim).astype(_od(1)))


@lower("std_mean.correction")
def _std_mean(x, dim=None, *, correction=None, keepdim=False):
    ax = _dims(x, dim)
    return (jnp.std(x, axis=ax, ddof=_correction(correction, None), keepdims=keepdim).astype(_od(0)),
            jnp.mean(x, axis=ax, keepdims=keepdim).astype(_od(1)))


@lower("logsumexp")
def _logsumexp(x, dim, keepdim=False):
    dt = _od()
    return jax.nn.logsumexp(x.astype(dt), axis=_dims(x, dim), keepdims=keepdim)


@lower("linalg_vector_norm", static=("ord",))
def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    dt = _od()
    x = jnp.abs(x).astype(dt) if jnp.iscomplexobj(x) else jnp.abs(x.astype(dt))
    ax = _dims(x, dim)
    if ord == float("inf"):
        return jnp.max(x, axis=ax, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(x, axis=ax, keepdims=keepdim)
    if ord == 0:
        return jnp.sum((x != 0).astype(dt), axis=ax, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(x, axis=ax, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=ax, keepdims=keepdim))
    return jnp.sum(x ** ord, axis=ax, keepdims=keepdim) ** (1.0 / ord)


@lower("_softmax")
def _softmax(x, dim, half_to_float=False):
    dt = _od()
    return jax.nn.softmax(x.astype(dt), axis=dim % max(x.ndim, 1)) if x.ndim else jnp.ones((), dt)


@lower("_log_softmax")
def _log_softmax(x, dim, half_to_float=False):
    dt = _od()
    return jax.nn.log_softmax(x.astype(dt), axis=dim % max(x.ndim, 1)) if x.ndim else jnp.zeros((), dt)


@lower("_softmax_backward_data")
def _softmax_bwd(grad, out, dim, input_dtype):
    dt = _od()
    g, y = grad.astype(dt), out.astype(dt)
    return y * (g - jnp.sum(g * y, axis=dim, keepdims=True))


@lower("_log_softmax_backward_data")
def _log_softmax_bwd(grad, out, dim, input_dtype):
    dt = _od()
    g, y = grad.astype(dt), out.astype(dt)
    return g - jnp.exp(y) * jnp.sum(g, axis=dim, keepdims=True)


@lower("cumsum")
def _cumsum(x, dim, *, dtype=None):
    dt = _od()
    if x.ndim == 0:
        return x.astype(dt)
    return jnp.cumsum(x.astype(dt), axis=dim % x.ndim)


@lower("cumprod")
def _cumprod(x, dim, *, dtype=None):
    dt = _od()
    if x.ndim == 0:
        return x.astype(dt)
    return jnp.cumprod(x.astype(dt), axis=dim % x.ndim)


def _cum_ext(fn, x, dim):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    if x.dtype == jnp.bool_:
        v, i = _cum_ext(fn, x.astype(jnp.int8), dim)
        return v.astype(jnp.bool_), i
    d = dim % x.ndim
    vals = fn(x, axis=d)
    n = x.shape[d]
    idx = jnp.arange(n, dtype=jnp.int64).reshape([n if i == d else 1 for i in range(x.ndim)])
    hit = jnp.where(x == vals, jnp.broadcast_to(idx, x.shape), -1)
    return vals, lax.cummax(hit, axis=d)


@lower("cummax")
def _cummax(x, dim):
    return _cum_ext(lambda a, axis: lax.cummax(a, axis=axis), x, dim)


@lower("cummin")
def _cummin(x, dim):
    return _cum_ext(lambda a, axis: lax.cummin(a, axis=axis), x, dim)


@lower("logcumsumexp")
def _logcumsumexp(x, dim):
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x, axis=dim % x.ndim)


@lower("sort", "sort.stable")
def _sort(x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool):
        stable, dim = dim, -1
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    key = -x if descending and x.dtype != jnp.bool_ else x
    if descending and x.dtype == jnp.bool_:
        key = ~x
    idx = jnp.argsort(key, axis=d, stable=True).astype(jnp.int64)
    return jnp.take_along_axis(x, idx, axis=d), idx


@lower("topk")
def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    xm = jnp.moveaxis(x, d, -1)
    if largest:
        v, i = lax.top_k(xm, k)
    else:
        v, i = lax.top_k(-xm, k)
        v = -v
    return jnp.moveaxis(v, -1, d), jnp.moveaxis(i.astype(jnp.int64), -1, d)


# -- order statistics ----------------------------------------------------------

def _nan_last_sort(x, axis):
    """Sorted values and stable argsort along axis, NaN last (PyTorch's order)."""
    idx = jnp.argsort(x, axis=axis, stable=True)
    return jnp.take_along_axis(x, idx, axis=axis), idx.astype(jnp.int64)


def _pick(x, dim, keepdim, pos_fn):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    vals, idx = _nan_last_sort(x, d)
    pos = pos_fn(x, d)  # int array broadcastable, shape with axis d of size 1
    v = jnp.take_along_axis(vals, pos, axis=d)
    i = jnp.take_along_axis(idx, pos, axis=d)
    if not keepdim:
        v, i = jnp.squeeze(v, d), jnp.squeeze(i, d)
    return v, i


def _median_pos(x, d, ignore_nan):
    n = x.shape[d]
    shape = list(x.shape)
    shape[d] = 1
    if jnp.issubdtype(x.dtype, jnp.floating):
        nans = jnp.sum(jnp.isnan(x), axis=d, keepdims=True)
        if ignore_nan:
            cnt = n - nans
            return jnp.maximum((cnt - 1) // 2, 0).astype(jnp.int64)
        # any NaN: the median is NaN, the first NaN in sorted order (index n - nans)
        return jnp.where(nans > 0, n - nans, (n - 1) // 2).astype(jnp.int64)
    return jnp.full(shape, (n - 1) // 2, jnp.int64)


@lower("median.dim")
def _median_dim(x, dim, keepdim=False):
    return _pick(x, dim, keepdim, lambda x, d: _median_pos(x, d, False))


@lower("nanmedian.dim")
def _nanmedian_dim(x, dim, keepdim=False):
    return _pick(x, dim, keepdim, lambda x, d: _median_pos(x, d, True))


def _nan_if_empty(rule):
    """eager's median of an empty float tensor is nan (the rules would read index 0)"""
    def wrapped(x):
        if x.size == 0 and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.full((), jnp.nan, x.dtype)
        return rule(x)
    return wrapped


@lower("median")
@_nan_if_empty
def _median(x):
    return _median_dim(x.reshape(-1), 0)[0]


@lower("nanmedian")
@_nan_if_empty
def _nanmedian(x):
    return _nanmedian_dim(x.reshape(-1), 0)[0]


@lower("kthvalue")
def _kthvalue(x, k, dim=-1, keepdim=False):
    def pos(x, d):
        shape = list(x.shape)
        shape[d] = 1
        return jnp.full(shape, k - 1, jnp.int64)
    return _pick(x, dim, keepdim, pos)


@lower("searchsorted.Tensor", "searchsorted.Scalar")
def _searchsorted(seq, x, *, out_int32=False, right=False, side=None, sorter=None):
    side = side or ("right" if right else "left")
    odt = ctx.entry.out_dtype(0)
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    if not hasattr(x, "ndim"):
        x = jnp.asarray(x, seq.dtype)
    if seq.ndim == 1:
        return jnp.searchsorted(seq, x, side=side).astype(odt)
    lead = seq.shape[:-1]
    s2 = seq.reshape((-1, seq.shape[-1]))
    x2 = x.reshape((s2.shape[0], -1))
    out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(s2, x2)
    return out.reshape(lead + x.shape[len(lead):]).astype(odt)


@lower("bucketize.Tensor", "bucketize.Scalar")
def _bucketize(x, boundaries, *, out_int32=False, right=False):
    if not hasattr(x, "ndim"):
        x = jnp.asarray(x, boundaries.dtype)
    # right=False: first i with boundaries[i] >= x, as searchsorted side='left'
    return jnp.searchsorted(boundaries, x, side="right" if right else "left").astype(ctx.entry.out_dtype(0))
