"""Reductions, softmax families and cumulative ops."""
import jax
import jax.numpy as jnp
import torch
from jax import lax
from torch._prims_common import canonicalize_dim

from . import numerics as nx
from .context import out_dtype
from .registry import ctx, lower, meta



def _ct(i=0):
    """The dtype eager computes output i in: float32 for float16 / bfloat16 outputs
    (eager accumulates and evaluates half types in float32 and rounds once)."""
    return nx.opmath_dtype(ctx.entry.out_dtype(i))


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
    return jnp.sum(nx.cast(x, out_dtype()).astype(_ct()), axis=_dims(x, dim), keepdims=keepdim).astype(out_dtype())


@lower("mean", "mean.dim")
def _mean(x, dim=None, keepdim=False, *, dtype=None):
    return jnp.mean(nx.cast(x, out_dtype()).astype(_ct()), axis=_dims(x, dim), keepdims=keepdim).astype(out_dtype())


@lower("prod", "prod.dim_int")
def _prod(x, dim=None, keepdim=False, *, dtype=None):
    # in the output dtype: eager's product of half values rounds at every step too
    return jnp.prod(nx.cast(x, out_dtype()), axis=_dims(x, dim), keepdims=keepdim)


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
    return jnp.any(nx.truthy(x), axis=_dims(x, dim), keepdims=keepdim).astype(out_dtype())


@lower("all", "all.dim", "all.dims")
def _all(x, dim=None, keepdim=False):
    return jnp.all(nx.truthy(x), axis=_dims(x, dim), keepdims=keepdim).astype(out_dtype())


def _correction(correction, unbiased):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def _moments(x, dim, correction, keepdim):
    """(variance, mean) as eager: the sum of squared deviations over
    max(0, N - correction), so a correction of N or more gives inf (nan when every
    deviation is 0); half types in float32."""
    ax = _dims(x, dim)
    x = nx.up(x)
    n = 1
    for d in (range(x.ndim) if ax is None else ax):
        n *= x.shape[d]
    mean = jnp.mean(x, axis=ax, keepdims=True)
    dev = x - mean

    def over_n(dev):
        ss = jnp.sum(dev * dev, axis=ax, keepdims=keepdim)
        if isinstance(correction, (int, float)):
            return ss / max(0.0, n - correction)
        # a scalar leaf
        return ss / jnp.maximum(n - correction.astype(ss.dtype), jnp.zeros((), ss.dtype))
    # complex: the real part's variance plus the imaginary part's, as eager adds them
    var = over_n(jnp.real(dev)) + over_n(jnp.imag(dev)) if jnp.iscomplexobj(dev) else over_n(dev)
    if not keepdim:
        mean = mean.reshape(var.shape)
    return var, mean, ax


def _welford_mean(x, ax, mean):
    """The mean eager's var_mean / std_mean give (a Welford pass in reading order):
    an infinity followed by any value makes it nan (inf - inf); an infinity read
    last is the mean. Finite rows keep `mean`."""
    if jnp.iscomplexobj(x) or not jnp.issubdtype(x.dtype, jnp.floating):
        return mean
    x = nx.up(x)
    ax = tuple(range(x.ndim)) if ax is None else ax
    keep = [i for i in range(x.ndim) if i not in ax]
    n = 1
    for d in ax:
        n *= x.shape[d]
    if n == 0 or x.size == 0:
        return mean
    rows = jnp.transpose(x, keep + list(ax)).reshape([x.shape[i] for i in keep] + [n])
    odd = ~jnp.isfinite(rows)
    count = jnp.sum(odd, axis=-1)
    last = rows[..., -1]
    kept = (count == 1) & odd[..., -1] & ~jnp.isnan(last)
    odd_mean = jnp.where(kept, last, jnp.full((), jnp.nan, last.dtype))
    return jnp.where((count == 0).reshape(mean.shape), mean, odd_mean.reshape(mean.shape).astype(mean.dtype))


@lower("var.correction", "var.dim", "var")
def _var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return _moments(x, dim, _correction(correction, unbiased), keepdim)[0].astype(out_dtype())


@lower("std.correction", "std.dim", "std")
def _std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return jnp.sqrt(_moments(x, dim, _correction(correction, unbiased), keepdim)[0]).astype(out_dtype())


@lower("var_mean.correction")
def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    var, mean, ax = _moments(x, dim, _correction(correction, None), keepdim)
    return var.astype(out_dtype(0)), _welford_mean(x, ax, mean).astype(out_dtype(1))


@lower("std_mean.correction")
def _std_mean(x, dim=None, *, correction=None, keepdim=False):
    var, mean, ax = _moments(x, dim, _correction(correction, None), keepdim)
    return jnp.sqrt(var).astype(out_dtype(0)), _welford_mean(x, ax, mean).astype(out_dtype(1))


@lower("logsumexp")
def _logsumexp(x, dim, keepdim=False):
    dt = out_dtype()
    if dt not in nx.HALF or x.size == 0:
        return jax.nn.logsumexp(nx.cast(x, _ct()), axis=_dims(x, dim), keepdims=keepdim).astype(dt)
    # half types as eager's composite: each aten op rounds to the half type (x - max,
    # exp, the float32 sum, log, + max), an infinite max counted as 0
    ax = _dims(x, dim)
    x = nx.cast(x, dt)
    m = jnp.max(x, axis=ax, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), dt), m)
    f32 = jnp.float32
    e = jnp.exp((x.astype(f32) - m.astype(f32)).astype(dt).astype(f32)).astype(dt)
    s = jnp.sum(e.astype(f32), axis=ax, keepdims=keepdim).astype(dt)
    if not keepdim:
        m = m.reshape(s.shape)
    return (jnp.log(s.astype(f32)).astype(dt).astype(f32) + m.astype(f32)).astype(dt)


@lower("linalg_vector_norm", static=("ord",))
def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    dt, ct = out_dtype(), _ct()
    ax = _dims(x, dim)
    if ord == 0:   # the count of nonzero values, read from the bits before any float op
        return jnp.sum(nx.cast(nx.truthy(x), ct), axis=ax, keepdims=keepdim).astype(dt)
    x = jnp.abs(x).astype(ct) if jnp.iscomplexobj(x) else jnp.abs(nx.cast(x, dt).astype(ct))
    n = 1
    for d in (range(x.ndim) if ax is None else ax):
        n *= x.shape[d]
    if n == 1 or ord == 1:
        # eager's norm of one element is its magnitude (no power that could overflow)
        return jnp.sum(x, axis=ax, keepdims=keepdim).astype(dt)
    if ord == float("inf"):
        return jnp.max(x, axis=ax, keepdims=keepdim).astype(dt)
    if ord == float("-inf"):
        return jnp.min(x, axis=ax, keepdims=keepdim).astype(dt)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=ax, keepdims=keepdim)).astype(dt)
    return (jnp.sum(x ** ord, axis=ax, keepdims=keepdim) ** (1.0 / ord)).astype(dt)


def _along(x, dim):
    """(x viewed with at least one dimension, the axis): eager treats a 0-d
    tensor as one element along dim 0 or -1."""
    if x.ndim == 0:
        return x.reshape(1), 0
    return x, dim % x.ndim


@meta("_softmax")
def _softmax_meta(x, dim, half_to_float):
    # PyTorch's meta kernel takes any dim; eager's IndexError, in PyTorch's own words.
    # (Not an eager probe: eager's CPU kernel refuses half_to_float, which XLA runs.)
    canonicalize_dim(x.dim(), dim)
    return torch.ops.aten._softmax.default(x, dim, half_to_float)


def _half_softmax_along(x, dim):
    """(x in float32, its max and its exp(x - max) along dim, the axis, the output
    dtype) for a half-type softmax computed as eager's CPU kernels compute it, or
    None: a float32 / float64 softmax, or eager's last-dim kernel (`x.ndim - 1`)."""
    dt = out_dtype()
    if dt not in nx.HALF or x.ndim == 0 or x.size == 0:
        return None
    d = dim % x.ndim
    xf = nx.cast(x, dt).astype(jnp.float32)
    m = jnp.max(xf, axis=d, keepdims=True)
    return xf, m, d, dt


@lower("_softmax")
def _softmax(x, dim, half_to_float=False):
    if x.size == 0:   # eager runs no kernel on nothing (a bool tensor included)
        return jnp.zeros(x.shape, out_dtype())
    half = _half_softmax_along(x, dim)
    if half is not None and half[2] != x.ndim - 1:
        # eager's kernel for another dim stores exp(x - max) in the half type,
        # then divides it by the float32 sum of the unrounded exponentials
        xf, m, d, dt = half
        e = jnp.exp(xf - m)
        return (e.astype(dt).astype(jnp.float32) / jnp.sum(e, axis=d, keepdims=True)).astype(dt)
    # 0-d too: exp(x - x) / exp(x - x) is nan for an infinite or nan x, as eager's
    x1, d = _along(nx.cast(x, _ct()), dim)
    return jax.nn.softmax(x1, axis=d).reshape(x.shape).astype(out_dtype())


@lower("_safe_softmax")
def _safe_softmax(x, dim, dtype=None):
    """softmax, with 0 for a row that is all -inf (a fully masked attention row)
    where softmax gives nan; one rule instead of PyTorch's five-op decomposition."""
    out = _softmax(x, dim)
    x1, d = _along(x, dim)
    dead = jnp.all(x1 == -jnp.inf, axis=d, keepdims=True)
    if x.ndim == 0:
        dead = dead.reshape(())
    return jnp.where(dead, jnp.zeros((), out.dtype), out)


@lower("_log_softmax")
def _log_softmax(x, dim, half_to_float=False):
    if x.size == 0:
        return jnp.zeros(x.shape, out_dtype())
    half = _half_softmax_along(x, dim)
    if half is not None and half[2] == x.ndim - 1:
        # eager's last-dim kernel keeps the sum of exp(x - max) and its log in the
        # half type: x - max - log(sum), the log's argument and result rounded
        xf, m, d, dt = half
        s = jnp.sum(jnp.exp(xf - m), axis=d, keepdims=True).astype(dt).astype(jnp.float32)
        return ((xf - m) - jnp.log(s).astype(dt).astype(jnp.float32)).astype(dt)
    x1, d = _along(nx.cast(x, _ct()), dim)
    return jax.nn.log_softmax(x1, axis=d).reshape(x.shape).astype(out_dtype())


@lower("_softmax_backward_data")
def _softmax_bwd(grad, out, dim, input_dtype):
    ct = _ct()
    g, y = grad.astype(ct), out.astype(ct)
    d = dim % max(g.ndim, 1) if g.ndim else None
    return (y * (g - jnp.sum(g * y, axis=d, keepdims=True))).astype(out_dtype())


@lower("_log_softmax_backward_data")
def _log_softmax_bwd(grad, out, dim, input_dtype):
    ct = _ct()
    g, y = grad.astype(ct), out.astype(ct)
    d = dim % max(g.ndim, 1) if g.ndim else None
    return (g - jnp.exp(y) * jnp.sum(g, axis=d, keepdims=True)).astype(out_dtype())


@lower("cumsum")
def _cumsum(x, dim, *, dtype=None):
    x = nx.cast(x, out_dtype()).astype(_ct())
    if x.ndim == 0:
        return x.astype(out_dtype())
    return jnp.cumsum(x, axis=dim % x.ndim).astype(out_dtype())


@lower("cumprod")
def _cumprod(x, dim, *, dtype=None):
    x = nx.cast(x, out_dtype()).astype(_ct())
    if x.ndim == 0:
        return x.astype(out_dtype())
    return jnp.cumprod(x, axis=dim % x.ndim).astype(out_dtype())


def _cum_ext(fn, x, dim):
    """cummax / cummin as eager's loop: the running extreme's index is the latest
    position holding it (ties and repeats move it forward), and a NaN, once
    seen, is the extreme (each later NaN takes over). The values are read back at
    those indices, so a tie of 0.0 and -0.0 keeps the later one's sign."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    if x.dtype == jnp.bool_:
        v, i = _cum_ext(fn, x.astype(jnp.int8), dim)
        return v.astype(jnp.bool_), i
    d = dim % x.ndim
    vals = fn(x, axis=d)
    n = x.shape[d]
    idx = jnp.arange(n, dtype=jnp.int64).reshape([n if i == d else 1 for i in range(x.ndim)])
    same = x == vals
    if jnp.issubdtype(x.dtype, jnp.inexact):
        same = same | (jnp.isnan(x) & jnp.isnan(vals))
    hit = jnp.where(same, jnp.broadcast_to(idx, x.shape), -1)
    at = lax.cummax(hit, axis=d)
    return jnp.take_along_axis(x, at, axis=d), at


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


def _descending_keys(x):
    """Sort keys (most significant first) that order x descending as eager does:
    NaN first (eager's NaN is the largest value), then the numbers from the
    largest; negating keeps the integers' order only through a bitwise not."""
    if x.dtype == jnp.bool_:
        return (~x,)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return (jnp.invert(x),)
    return (~jnp.isnan(x), -x)


@lower("sort", "sort.stable")
def _sort(x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool):
        stable, dim = dim, -1
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    if not descending:
        idx = jnp.argsort(x, axis=d, stable=True).astype(jnp.int64)
        return jnp.take_along_axis(x, idx, axis=d), idx
    keys = _descending_keys(x)
    iota = lax.broadcasted_iota(jnp.int64, x.shape, d)
    out = lax.sort(keys + (iota,), dimension=d, is_stable=True, num_keys=len(keys))
    idx = out[-1]
    return jnp.take_along_axis(x, idx, axis=d), idx


@lower("topk")
def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = dim % x.ndim
    xm = jnp.moveaxis(x, d, -1)
    if largest:
        _, i = lax.top_k(xm, k)
    else:   # the first k of the ascending, NaN-last order: top_k of -x ranks a NaN by
        #     its sign bit on CPU and as the largest on GPU
        i = lax.slice_in_dim(jnp.argsort(xm, axis=-1, stable=True), 0, k, axis=-1)
    v = jnp.take_along_axis(xm, i, axis=-1)
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
