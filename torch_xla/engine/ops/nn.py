"""Neural-network rules: convolution, pooling, normalisation, losses,
attention. Backward ops are the vjp of the forward rule, so forward and
backward agree by construction."""
import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from . import numerics as nx
from .context import out_dtype, out_shape
from .numerics import cast
from .registry import ctx, lower, meta, vjp_of




def _prec(dt):
    return lax.Precision.HIGHEST if dt == jnp.float32 else None


# -- convolution -------------------------------------------------------------

def _dn(nd):
    sp = "DHW"[-nd:] if nd <= 3 else None
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups, acc=None):
    """acc: the dtype of the result (the accumulation's, unrounded), None: x's."""
    nd = x.ndim - 2
    stride = list(stride) * (nd if len(stride) == 1 else 1)
    dilation = list(dilation) * (nd if len(dilation) == 1 else 1)
    padding = list(padding) * (nd if len(padding) == 1 else 1)
    if not transposed and groups == 1 and all(k == 1 for k in w.shape[2:]) and not any(padding):
        return _pointwise_conv(x, w, stride, acc)
    if not transposed:
        return lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding], rhs_dilation=dilation,
            dimension_numbers=_dn(nd), feature_group_count=groups, precision=_prec(x.dtype),
            preferred_element_type=acc)
    output_padding = list(output_padding) * (nd if len(output_padding) == 1 else 1)
    # weight (in, out/g, *k) -> (out, in/g, *k), spatially flipped
    cin = w.shape[0]
    k = w.shape[2:]
    w = w.reshape((groups, cin // groups, w.shape[1]) + k)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * w.shape[2], cin // groups) + k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    pads = [(dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
            for i in range(nd)]
    return lax.conv_general_dilated(
        x, w, window_strides=[1] * nd, padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        dimension_numbers=_dn(nd), feature_group_count=groups, precision=_prec(x.dtype),
        preferred_element_type=acc)


def _pointwise_conv(x, w, stride, acc=None):
    """A 1x1 convolution (no padding, one group) as the matmul it is: XLA:CPU's
    convolution kernels, above all the weight gradient, run several times slower
    than its dot on the same shapes. Dilation does not matter for a 1x1 kernel; a
    stride keeps every s-th position."""
    if any(s != 1 for s in stride):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
    y = lax.dot_general(x, w.reshape(w.shape[:2]), (((1,), (1,)), ((), ())), precision=_prec(x.dtype),
                        preferred_element_type=acc)
    return jnp.moveaxis(y, -1, 1)   # (N, *sp, O) -> (N, O, *sp)


@lower("convolution", "_convolution")
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups, *rest):
    dt = out_dtype()
    x, w = x.astype(dt), w.astype(dt)
    if isinstance(padding, str):
        raise NotImplementedError("string padding reaches aten as numbers")
    if bias is None:
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups)
    # half types: the bias joins the float32 accumulation and the sum rounds once, as
    # eager's fused bias does (two roundings moved bf16 gradients by 10%)
    acc = jnp.float32 if dt in (jnp.bfloat16, jnp.float16) else None
    y = _conv(x, w, stride, padding, dilation, transposed, output_padding, groups, acc)
    return (y + bias.astype(y.dtype).reshape((1, -1) + (1,) * (y.ndim - 2))).astype(dt)


@lower("convolution_backward")
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    def f(x_, w_):
        return _conv(x_, w_, stride, padding, dilation, transposed, output_padding, groups)
    gx, gw = vjp_of(f, (x, w), grad)
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, _bias_grad(grad, output_mask))


def _bias_grad(grad, output_mask):
    return jnp.sum(grad, axis=(0,) + tuple(range(2, grad.ndim))) if output_mask[2] else None


def _weight_grad_by_offsets(grad, x, kernel, stride, padding, dilation):
    """A convolution's weight gradient as one dot per kernel offset: for offset
    k, dw[:, :, k] contracts the output gradient with the (strided) window of
    the padded input that offset reads, over batch and output positions."""
    nd = len(kernel)
    out_sp = grad.shape[2:]
    xp = jnp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    lead = (0,) + tuple(range(2, 2 + nd))
    low = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else None
    cols = []
    for off in np.ndindex(*kernel):
        start = [0, 0] + [o * d for o, d in zip(off, dilation)]
        limit = list(x.shape[:2]) + [st + (n - 1) * s + 1 for st, n, s in zip(start[2:], out_sp, stride)]
        win = lax.slice(xp, start, limit, [1, 1] + list(stride))
        cols.append(lax.dot_general(grad, win, ((lead, lead), ((), ())), precision=_prec(x.dtype),
                                    preferred_element_type=low))
    gw = jnp.stack(cols, axis=-1).reshape(grad.shape[1], x.shape[1], *kernel)
    return gw.astype(x.dtype)


def _offsets_pay(grad_shape, cin, kernel):
    """Each offset's dot costs XLA:CPU compile time (~0.02 s); up to 3x3 kernels, or
    where the gradient is big enough (a ResNet stem) that run time dominates."""
    offsets = int(np.prod(kernel))
    return offsets <= 9 or 2 * int(np.prod(grad_shape)) * cin * offsets >= 5e8


@lower("convolution_backward", platform="cpu")
def _convolution_backward_cpu(grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                              groups, output_mask):
    """On XLA:CPU the weight gradient of a plain convolution runs as per-offset
    dots: XLA's own form of it (a convolution over the batch) ran 1.2-1.9x slower
    than the dots on ResNet-18's 3x3 shapes and ~2x on its 7x7 stem."""
    nd = x.ndim - 2
    k = tuple(w.shape[2:])
    st, pd, dl = (_norm(v, nd) for v in (stride, padding, dilation))
    if not output_mask[1] or transposed or groups != 1 or nd > 3 or all(n == 1 for n in k) and not any(pd) \
            or not _offsets_pay(grad.shape, x.shape[1], k):
        return _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                                     output_padding, groups, output_mask)
    grad = grad.astype(x.dtype)
    gx = None
    if output_mask[0]:
        gx = vjp_of(lambda x_: _conv(x_, w, st, pd, dl, False, output_padding, 1), (x,), grad)[0]
    gw = _weight_grad_by_offsets(grad, x, k, st, pd, dl).astype(w.dtype)
    return gx, gw, _bias_grad(grad, output_mask)


# -- pooling -----------------------------------------------------------------

def _norm(v, nd):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * nd if len(v) == 1 else v


def _pool_pads(in_sp, out_sp, kernel, stride, padding, dilation):
    pads = []
    for n, o, k, s, p, d in zip(in_sp, out_sp, kernel, stride, padding, dilation):
        hi = (o - 1) * s + (k - 1) * d + 1 - n - p
        pads.append((p, max(hi, 0)))
    return pads


def _max_pool(x, kernel, stride, padding, dilation, out_sp):
    nd = len(kernel)
    lead = x.ndim - nd
    pads = _pool_pads(x.shape[lead:], out_sp, kernel, stride, padding, dilation)
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.iinfo(x.dtype).min
    return lax.reduce_window(x, np.array(init, dtype=x.dtype), lax.max, (1,) * lead + tuple(kernel),
                             (1,) * lead + tuple(stride), [(0, 0)] * lead + pads,
                             window_dilation=(1,) * lead + tuple(dilation))


def _max_pool_indices(x, kernel, stride, padding, dilation, out_sp):
    """argmax positions (flat over the spatial dims) by scanning window offsets."""
    nd = len(kernel)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    pads = _pool_pads(sp, out_sp, kernel, stride, padding, dilation)
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.iinfo(x.dtype).min
    xp = jnp.pad(x, [(0, 0)] * lead + pads, constant_values=init)
    flat = np.arange(int(np.prod(sp))).reshape(sp)
    flatp = np.pad(flat, pads, constant_values=-1)
    best = None
    best_i = None
    for off in np.ndindex(*kernel):
        sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(off, dilation, out_sp, stride))
        v = xp[(slice(None),) * lead + sl]
        i = jnp.asarray(flatp[sl])
        if best is None:
            best, best_i = v, jnp.broadcast_to(i, v.shape)
        else:
            take = (v > best) | (jnp.isnan(v) & ~jnp.isnan(best)) if jnp.issubdtype(x.dtype, jnp.inexact) else v > best
            best = jnp.where(take, v, best)
            best_i = jnp.where(take, i, best_i)
    return best_i.astype(jnp.int64)


def _pool_args(x, nd, kernel, stride, padding, dilation):
    kernel = _norm(kernel, nd)
    stride = _norm(stride, nd) if stride else kernel
    return kernel, stride, _norm(padding, nd), _norm(dilation, nd)


def _max_pool_nd(nd):
    def rule(x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
        k, s, p, d = _pool_args(x, nd, kernel, stride, padding, dilation)
        out_sp = out_shape(0)[-nd:]
        return _max_pool(x, k, s, p, d, out_sp), _max_pool_indices(x, k, s, p, d, out_sp)
    return rule


def _max_pool_nd_bwd(nd):
    def rule(grad, x, kernel, stride, padding, dilation, ceil_mode, indices):
        k, s, p, d = _pool_args(x, nd, kernel, stride, padding, dilation)
        out_sp = grad.shape[-nd:]
        return vjp_of(lambda y: _max_pool(y, k, s, p, d, out_sp), (x,), grad)[0]
    return rule


lower("max_pool2d_with_indices")(_max_pool_nd(2))
lower("max_pool3d_with_indices")(_max_pool_nd(3))
lower("max_pool2d_with_indices_backward")(_max_pool_nd_bwd(2))
lower("max_pool3d_with_indices_backward")(_max_pool_nd_bwd(3))


@lower("max_pool2d", "max_pool1d", "max_pool3d")
def _max_pool_plain(x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    nd = len(_norm(kernel, 1)) if isinstance(kernel, (list, tuple)) and len(kernel) > 1 else \
        {"max_pool1d": 1, "max_pool2d": 2, "max_pool3d": 3}[ctx.entry.name.split(".")[0]]
    k, s, p, d = _pool_args(x, nd, kernel, stride, padding, dilation)
    return _max_pool(x, k, s, p, d, out_shape(0)[-nd:])


def _avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, out_sp):
    nd = len(kernel)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    pads = _pool_pads(sp, out_sp, kernel, stride, padding, [1] * nd)
    win = (1,) * lead + tuple(kernel)
    strides = (1,) * lead + tuple(stride)
    allpads = [(0, 0)] * lead + pads
    s = lax.reduce_window(x, np.array(0, dtype=x.dtype), lax.add, win, strides, allpads)
    if divisor_override:   # true quotients, as eager's (XLA would multiply by 1 / constant)
        return nx.true_divide(s, jnp.asarray(divisor_override, x.dtype), opaque=True)
    if count_include_pad:
        ones = np.pad(np.ones(sp, np.float32), [(p, p) for p in padding], constant_values=1)
        extra = [(0, max(hi - p, 0)) for (p, hi), p in zip(pads, padding)]
        ones = np.pad(ones, extra, constant_values=0)
        cnt = lax.reduce_window(jnp.asarray(ones), 0.0, lax.add, tuple(kernel), tuple(stride), [(0, 0)] * nd)
    else:
        ones = jnp.ones(sp, jnp.float32)
        cnt = lax.reduce_window(ones, 0.0, lax.add, tuple(kernel), tuple(stride), pads)
    return nx.true_divide(s, cnt.astype(x.dtype), opaque=True)


def _avg_pool_nd(nd):
    def rule(x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
        k = _norm(kernel, nd)
        s = _norm(stride, nd) if stride else k
        return _avg_pool(x, k, s, _norm(padding, nd), ceil_mode, count_include_pad, divisor_override, out_shape(0)[-nd:])
    return rule


def _avg_pool_nd_bwd(nd):
    def rule(grad, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
        k = _norm(kernel, nd)
        s = _norm(stride, nd) if stride else k
        out_sp = grad.shape[-nd:]
        return vjp_of(lambda y: _avg_pool(y, k, s, _norm(padding, nd), ceil_mode, count_include_pad,
                                          divisor_override, out_sp), (x,), grad)[0]
    return rule


# half types: eager sums a window in float32 and rounds the average once
lower("avg_pool2d")(nx.opmath(_avg_pool_nd(2)))
lower("avg_pool3d")(nx.opmath(_avg_pool_nd(3)))
lower("avg_pool1d")(nx.opmath(_avg_pool_nd(1)))
lower("avg_pool2d_backward")(nx.opmath(_avg_pool_nd_bwd(2)))
lower("avg_pool3d_backward")(nx.opmath(_avg_pool_nd_bwd(3)))


def _adaptive_matrix(n, o):
    m = np.zeros((o, n), np.float64)
    for i in range(o):
        s = (i * n) // o
        e = -((-(i + 1) * n) // o)
        m[i, s:e] = 1.0 / (e - s)
    return m


def _adaptive_avg(x, out_sp):
    nd = len(out_sp)
    y = x
    for j, o in enumerate(out_sp):
        ax = x.ndim - nd + j
        n = x.shape[ax]
        if n == o:
            continue
        if n % o == 0:
            shp = y.shape[:ax] + (o, n // o) + y.shape[ax + 1:]
            y = y.reshape(shp).mean(axis=ax + 1)
        else:
            m = jnp.asarray(_adaptive_matrix(n, o), y.dtype)
            y = jnp.moveaxis(jnp.tensordot(y, m, axes=[[ax], [1]], precision=_prec(y.dtype)), -1, ax)
    return y


@lower("_adaptive_avg_pool2d", "adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d",
       "adaptive_avg_pool3d")
@nx.opmath
def _adaptive_avg_pool(x, output_size):
    nd = len(output_size)
    return _adaptive_avg(x, out_shape(0)[-nd:])


@lower("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward")
@nx.opmath
def _adaptive_avg_pool_bwd(grad, x):
    nd = 2 if ctx.entry.name.startswith("_adaptive_avg_pool2d") else 3
    return vjp_of(lambda y: _adaptive_avg(y, grad.shape[-nd:]), (x,), grad)[0]


# -- normalisation -----------------------------------------------------------

def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bshape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _bn_train(x, w, b, eps):
    ax = _bn_axes(x)
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    xc = x.astype(cd)
    mean = jnp.mean(xc, axis=ax)
    var = jnp.mean(jnp.square(xc - mean.reshape(_bshape(x))), axis=ax)
    invstd = lax.rsqrt(var + eps)
    y = (xc - mean.reshape(_bshape(x))) * invstd.reshape(_bshape(x))
    if w is not None:
        y = y * w.astype(cd).reshape(_bshape(x))
    if b is not None:
        y = y + b.astype(cd).reshape(_bshape(x))
    return y.astype(x.dtype), mean, invstd, var


def _bn_eval(x, w, b, rm, rv, eps):
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    invstd = lax.rsqrt(rv.astype(cd) + eps)
    y = (x.astype(cd) - rm.astype(cd).reshape(_bshape(x))) * invstd.reshape(_bshape(x))
    if w is not None:
        y = y * w.astype(cd).reshape(_bshape(x))
    if b is not None:
        y = y + b.astype(cd).reshape(_bshape(x))
    return y.astype(x.dtype)


def batch_norm_lowering(x, w, b, rm, rv, *, training, momentum, eps):
    """-> (out, save_mean, save_invstd, new_running_mean, new_running_var)"""
    if training:
        y, mean, invstd, var = _bn_train(x, w, b, eps)
        n = x.size // x.shape[1]
        new_rm = new_rv = None
        if rm is not None:
            new_rm = ((1 - momentum) * rm + momentum * mean).astype(rm.dtype)
        if rv is not None:
            new_rv = ((1 - momentum) * rv + momentum * var * (n / max(n - 1, 1))).astype(rv.dtype)
        outs = [y, mean.astype(out_dtype(1)), invstd.astype(out_dtype(2))]
        return outs + [o for o in (new_rm, new_rv) if o is not None]
    y = _bn_eval(x, w, b, rm, rv, eps)
    return [y, jnp.zeros(out_shape(1), out_dtype(1)), jnp.zeros(out_shape(2), out_dtype(2))]


def batch_norm_meta(x, w, b, rm, rv, *, training, momentum, eps):
    c = x.shape[1]
    sdt = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    outs = [torch.empty_like(x)]
    if training:
        outs += [torch.empty((c,), dtype=sdt, device="meta"), torch.empty((c,), dtype=sdt, device="meta")]
        outs += [torch.empty_like(t) for t in (rm, rv) if t is not None]
    else:
        outs += [torch.empty((0,), dtype=sdt, device="meta"), torch.empty((0,), dtype=sdt, device="meta")]
    return tuple(outs)


@lower("native_batch_norm_backward")
def _bn_backward(grad, x, w, rm, rv, save_mean, save_invstd, train, eps, output_mask):
    wv = w if w is not None else jnp.ones((x.shape[1],), x.dtype)

    def f(x_, w_, b_):
        if train:
            return _bn_train(x_, w_, b_, eps)[0]
        return _bn_eval(x_, w_, b_, rm, rv, eps)
    gx, gw, gb = vjp_of(f, (x, wv, jnp.zeros_like(wv)), grad)
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb if output_mask[2] else None)


@lower("batch_norm_backward")
def _bn_backward2(grad, x, w, rm, rv, save_mean, save_var, update, eps, output_mask, reserve):
    return _bn_backward(grad, x, w, rm, rv, save_mean, save_var, update, eps, output_mask)


def _ln(x, normalized_shape, w, b, eps):
    axis = x.ndim - len(normalized_shape)
    ax = tuple(range(axis, x.ndim))
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    xc = x.astype(cd)
    mean = jnp.mean(xc, axis=ax, keepdims=True)
    var = jnp.mean(jnp.square(xc - mean), axis=ax, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = (xc - mean) * rstd
    if w is not None:
        y = y * w.astype(cd)
    if b is not None:
        y = y + b.astype(cd)
    return y.astype(x.dtype), mean, rstd


@lower("native_layer_norm")
def _native_layer_norm(x, normalized_shape, w, b, eps):
    y, mean, rstd = _ln(x, normalized_shape, w, b, eps)
    return y, mean.astype(out_dtype(1)), rstd.astype(out_dtype(2))


@lower("native_layer_norm_backward")
def _native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, w, b, output_mask):
    axis = x.ndim - len(normalized_shape)
    ax = tuple(range(axis, x.ndim))
    lead = tuple(range(axis))
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    g = grad.astype(cd)
    xhat = (x.astype(cd) - mean.astype(cd)) * rstd.astype(cd)
    gxhat = g * w.astype(cd) if w is not None else g
    gx = rstd.astype(cd) * (gxhat - jnp.mean(gxhat, axis=ax, keepdims=True)
                            - xhat * jnp.mean(gxhat * xhat, axis=ax, keepdims=True))
    gw = jnp.sum(g * xhat, axis=lead).astype(x.dtype) if output_mask[1] and w is not None else None
    gb = jnp.sum(g, axis=lead).astype(x.dtype) if output_mask[2] and b is not None else None
    return (gx.astype(x.dtype) if output_mask[0] else None, gw, gb)


@lower("native_group_norm")
def _native_group_norm(x, w, b, N, C, HxW, group, eps):
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    xg = x.astype(cd).reshape(N, group, -1)
    mean = jnp.mean(xg, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(xg - mean), axis=2, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    y = ((xg - mean) * rstd).reshape(x.shape)
    if w is not None:
        y = y * w.astype(cd).reshape(_bshape(x))
    if b is not None:
        y = y + b.astype(cd).reshape(_bshape(x))
    return y.astype(x.dtype), mean.reshape(N, group).astype(out_dtype(1)), rstd.reshape(N, group).astype(out_dtype(2))


@lower("native_group_norm_backward")
def _native_group_norm_backward(grad, x, mean, rstd, w, N, C, HxW, group, output_mask):
    cd = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    g = grad.astype(cd).reshape(N, C, -1)
    xc = x.astype(cd).reshape(N, group, -1)
    m = mean.astype(cd).reshape(N, group, 1)
    r = rstd.astype(cd).reshape(N, group, 1)
    xhat = ((xc - m) * r).reshape(N, C, -1)
    gxhat = g * w.astype(cd).reshape(1, C, 1) if w is not None else g
    gxg = gxhat.reshape(N, group, -1)
    xhg = xhat.reshape(N, group, -1)
    gx = r * (gxg - jnp.mean(gxg, axis=2, keepdims=True) - xhg * jnp.mean(gxg * xhg, axis=2, keepdims=True))
    out_gx = gx.reshape(x.shape).astype(x.dtype) if output_mask[0] else None
    gw = jnp.sum(g * xhat, axis=(0, 2)).astype(out_dtype(1)) if output_mask[1] and w is not None else None
    gb = jnp.sum(g, axis=(0, 2)).astype(out_dtype(2)) if output_mask[2] else None
    return out_gx, gw, gb


# -- losses ------------------------------------------------------------------

def _reduce(loss, reduction):
    # a half-precision loss is reduced in float32 and rounded once, as eager's mean / sum
    if reduction == 1:
        return jnp.mean(nx.up(loss)).astype(loss.dtype)
    if reduction == 2:
        return jnp.sum(nx.up(loss)).astype(loss.dtype)
    return loss


def _nll(x, target, weight, reduction, ignore_index):
    c_axis = 1 if x.ndim > 1 else 0
    if not jnp.issubdtype(target.dtype, jnp.integer):
        target = target.astype(jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    valid = target != ignore_index
    t = jnp.where(valid, target, 0)
    # out-of-range targets clamp, as every gather here does (the deferred index check reports them)
    picked = jnp.take_along_axis(x, jnp.expand_dims(t, c_axis), axis=c_axis, mode="clip").squeeze(c_axis) \
        if x.ndim > 1 else jnp.take(x, t, mode="clip")
    w = jnp.take(weight, t, mode="clip") if weight is not None else jnp.ones(t.shape, x.dtype)
    w = jnp.where(valid, w, jnp.zeros((), x.dtype)).astype(x.dtype)
    loss = -picked * w
    if reduction == 1:
        total = jnp.sum(w)
        return jnp.sum(loss) / total, total
    if reduction == 2:
        return jnp.sum(loss), jnp.sum(w)
    return loss, jnp.sum(w)


def _nll_meta(packet, target_pos):
    # upstream torch_xla takes class indices held in a floating tensor (eager CPU refuses them)
    def m(*args, **kwargs):
        args = list(args)
        if args[target_pos].is_floating_point():
            args[target_pos] = args[target_pos].long()
        return packet.default(*args, **kwargs)
    return m


for _name, _pos in (("nll_loss_forward", 1), ("nll_loss2d_forward", 1), ("nll_loss_backward", 2),
                    ("nll_loss2d_backward", 2)):
    meta(_name)(_nll_meta(getattr(torch.ops.aten, _name), _pos))


@lower("nll_loss_forward", "nll_loss2d_forward")
def _nll_loss_forward(x, target, weight, reduction, ignore_index):
    out, total = _nll(x, target, weight, reduction, ignore_index)
    return out.astype(out_dtype(0)), total.astype(out_dtype(1))


@lower("nll_loss_backward", "nll_loss2d_backward")
def _nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    return vjp_of(lambda y: _nll(y, target, weight, reduction, ignore_index)[0], (x,), grad)[0]


@lower("mse_loss")
def _mse_loss(x, y, reduction=1):
    return _reduce(jnp.square(x - y), reduction)


@lower("mse_loss_backward")
def _mse_loss_backward(grad, x, y, reduction):
    return vjp_of(lambda a: _mse_loss(a, y, reduction), (x,), grad)[0]


def _bce(x, y, weight, reduction):
    eps_log = jnp.asarray(-100.0, x.dtype)
    loss = -(y * jnp.maximum(jnp.log(x), eps_log) + (1 - y) * jnp.maximum(jnp.log1p(-x), eps_log))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@lower("binary_cross_entropy")
def _binary_cross_entropy(x, y, weight=None, reduction=1):
    return _bce(x, y, weight, reduction)


@lower("binary_cross_entropy_backward")
def _binary_cross_entropy_backward(grad, x, y, weight=None, reduction=1):
    return vjp_of(lambda a: _bce(a, y, weight, reduction), (x,), grad)[0]


def _bce_logits(x, y, weight, pos_weight, reduction):
    log_sig = jax.nn.log_sigmoid(x)
    log_1m = jax.nn.log_sigmoid(-x)
    if pos_weight is not None:
        loss = -(pos_weight * y * log_sig + (1 - y) * log_1m)
    else:
        loss = -(y * log_sig + (1 - y) * log_1m)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@lower("binary_cross_entropy_with_logits")
def _binary_cross_entropy_with_logits(x, y, weight=None, pos_weight=None, reduction=1):
    return _bce_logits(x, y, weight, pos_weight, reduction)


def _huber(x, y, reduction, delta):
    d = jnp.abs(x - y)
    return _reduce(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@lower("huber_loss")
def _huber_loss(x, y, reduction=1, delta=1.0):
    return _huber(x, y, reduction, delta)


@lower("huber_loss_backward")
def _huber_loss_backward(grad, x, y, reduction, delta):
    return vjp_of(lambda a: _huber(a, y, reduction, delta), (x,), grad)[0]


def _smooth_l1(x, y, reduction, beta):
    d = jnp.abs(x - y)
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@lower("smooth_l1_loss")
def _smooth_l1_loss(x, y, reduction=1, beta=1.0):
    return _smooth_l1(x, y, reduction, beta)


@lower("smooth_l1_loss_backward")
def _smooth_l1_loss_backward(grad, x, y, reduction, beta):
    return vjp_of(lambda a: _smooth_l1(a, y, reduction, beta), (x,), grad)[0]


# -- attention ---------------------------------------------------------------

def _sdpa(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa=False):
    cd = q.dtype
    s = scale if scale is not None else 1.0 / np.sqrt(q.shape[-1])
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = jnp.repeat(k, rep, axis=-3)
        v = jnp.repeat(v, rep, axis=-3)
    logits = jnp.matmul(q, jnp.swapaxes(k, -1, -2), precision=_prec(cd)) * jnp.asarray(s, cd)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        causal = jnp.tril(jnp.ones((L, S), bool))
        logits = jnp.where(causal, logits, jnp.asarray(-jnp.inf, cd))
    if mask is not None:
        if mask.dtype == jnp.bool_:
            logits = jnp.where(mask, logits, jnp.asarray(-jnp.inf, cd))
        else:
            logits = logits + mask.astype(cd)
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.matmul(p, v, precision=_prec(cd)), p


@lower("_scaled_dot_product_attention_math")
def _sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None,
               enable_gqa=False):
    out, p = _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return out, p


# -- margin losses (backward as the vjp of the forward) ----------------------

def _multi_margin(x, target, p, margin, weight, reduction):
    x2 = x if x.ndim == 2 else x.reshape(1, -1)
    t = target.reshape(-1)
    C = x2.shape[1]
    xy = jnp.take_along_axis(x2, t[:, None], axis=1)
    z = jnp.maximum(jnp.asarray(margin, x.dtype) - xy + x2, 0)
    z = z ** p if p != 1 else z
    if weight is not None:
        z = z * weight[t][:, None]
    z = jnp.where(jnp.arange(C)[None, :] == t[:, None], 0, z)
    loss = jnp.sum(z, axis=1) / C
    if x.ndim < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


@lower("multi_margin_loss", static=("p",))
def _multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1):
    return _multi_margin(x, target, p, margin, weight, reduction).astype(out_dtype())


@meta("multi_margin_loss_backward", "multilabel_margin_loss_backward")
def _margin_backward_meta(grad, x, *args, **kwargs):
    return torch.empty_like(x, device="meta")


@lower("multi_margin_loss_backward", static=("p",))
def _multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=1):
    return vjp_of(lambda a: _multi_margin(a, target, p, margin, weight, reduction).astype(x.dtype), (x,), grad)[0]


def _multilabel_margin(x, target, reduction):
    x2 = x if x.ndim == 2 else x.reshape(1, -1)
    t2 = target if target.ndim == 2 else target.reshape(1, -1)
    C = x2.shape[1]
    # targets are the prefix of t before the first -1
    valid = jnp.cumprod(t2 >= 0, axis=1).astype(bool)
    tcl = jnp.where(valid, t2, 0)
    is_t = jnp.zeros(x2.shape, bool).at[jnp.arange(x2.shape[0])[:, None], tcl].max(valid)
    xt = jnp.take_along_axis(x2, tcl, axis=1)                              # [N, C] target scores
    z = jnp.maximum(1 - (xt[:, :, None] - x2[:, None, :]), 0)                # [N, j, k]
    z = jnp.where(valid[:, :, None] & ~is_t[:, None, :], z, 0)
    loss = jnp.sum(z, axis=(1, 2)) / C
    if x.ndim < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction), is_t.astype(x.dtype)


@lower("multilabel_margin_loss_forward")
def _multilabel_margin_loss_forward(x, target, reduction):
    loss, is_t = _multilabel_margin(x, target, reduction)
    return loss.astype(out_dtype(0)), is_t.reshape(ctx.entry.out_shape(1)).astype(out_dtype(1))


@lower("multilabel_margin_loss_backward")
def _multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    return vjp_of(lambda a: _multilabel_margin(a, target, reduction)[0].astype(x.dtype), (x,), grad)[0]


@lower("native_dropout_backward")
def _native_dropout_backward(grad, mask, scale):
    # one op (upstream's xla::native_dropout_backward), not a decomposed mul chain
    dt = out_dtype()
    return grad.astype(dt) * cast(mask, dt) * jnp.asarray(scale, dt)
