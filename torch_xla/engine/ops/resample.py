"""Resampling: upsample_* (nearest, nearest-exact, linear, bilinear, trilinear,
bicubic, with align_corners) and their backward ops, adaptive max pooling,
grid_sampler_2d.

Upsampling is separable: along each spatial axis the output is a weighted sum
of a few input slices, with indices and weights worked out once in NumPy from
the static sizes (PyTorch's own source-index formulas). Backward ops are the
jax.vjp of the forward rule.
"""
import jax
import jax.numpy as jnp
import numpy as np

from .context import out_dtype
from .registry import ctx, lower, vjp_of



def _scale(in_size, out_size, scale, align_corners):
    """PyTorch's area_pixel_compute_scale."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _nearest_taps(in_size, out_size, scale, exact):
    s = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    dst = np.arange(out_size, dtype=np.float64)
    # PyTorch computes the source index in float32
    s32 = np.float32(s)
    if exact:
        src = np.floor((dst.astype(np.float32) + np.float32(0.5)) * s32)
    else:
        src = np.floor(dst.astype(np.float32) * s32)
    idx = np.minimum(src.astype(np.int64), in_size - 1)
    return [(idx, None)]


def _linear_taps(in_size, out_size, scale, align_corners):
    s = np.float32(_scale(in_size, out_size, scale, align_corners))
    dst = np.arange(out_size, dtype=np.float32)
    if align_corners:
        src = s * dst
    else:
        src = np.maximum(s * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    l1 = src - i0
    return [(i0, 1.0 - l1), (i1, l1)]


def _cubic_weights(t, A=-0.75):
    def c1(x):  # |x| <= 1
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def c2(x):  # 1 < |x| < 2
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [c2(t + 1.0), c1(t), c1(1.0 - t), c2(2.0 - t)]


def _cubic_taps(in_size, out_size, scale, align_corners):
    s = np.float32(_scale(in_size, out_size, scale, align_corners))
    dst = np.arange(out_size, dtype=np.float32)
    src = s * dst if align_corners else s * (dst + np.float32(0.5)) - np.float32(0.5)
    i = np.floor(src)
    t = (src - i).astype(np.float64)
    i = i.astype(np.int64)
    ws = _cubic_weights(t)
    return [(np.clip(i + k - 1, 0, in_size - 1), ws[k]) for k in range(4)]


def _apply_axis(x, axis, taps):
    out = None
    for idx, w in taps:
        part = jnp.take(x, jnp.asarray(idx), axis=axis)
        if w is not None:
            shape = [1] * x.ndim
            shape[axis] = len(w)
            part = part * jnp.asarray(w.reshape(shape), x.dtype)
        out = part if out is None else out + part
    return out


def _resample(x, out_sizes, scales, kind, align_corners=False):
    nd = len(out_sizes)
    cd = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize >= 4 else jnp.float32
    orig = x.dtype
    y = x if kind.startswith("nearest") else x.astype(cd)
    for k in range(nd):
        axis = x.ndim - nd + k
        in_size, out_size = x.shape[axis], out_sizes[k]
        sc = scales[k] if scales is not None else None
        if kind == "nearest":
            taps = _nearest_taps(in_size, out_size, sc, False)
        elif kind == "nearest-exact":
            taps = _nearest_taps(in_size, out_size, sc, True)
        elif kind == "linear":
            taps = _linear_taps(in_size, out_size, sc, align_corners)
        else:
            taps = _cubic_taps(in_size, out_size, sc, align_corners)
        y = _apply_axis(y, axis, taps)
    return y.astype(orig)


def _vec_scales(scale_factors, nd):
    if scale_factors is None:
        return None
    return list(scale_factors)


def _fwd(kind, nd, has_align):
    def rule(x, output_size, *rest):
        if has_align:
            align, scales = rest[0], list(rest[1:])
        else:
            align, scales = False, list(rest)
        scales = (scales + [None] * nd)[:nd]
        out_sizes = ctx.entry.out_shape(0)[-nd:]
        return _resample(x, out_sizes, scales, kind, align)
    return rule


def _fwd_vec(kind, nd, has_align):
    def rule(x, output_size, *rest):
        if has_align:
            align, sf = rest[0], rest[1] if len(rest) > 1 else None
        else:
            align, sf = False, rest[0] if rest else None
        out_sizes = ctx.entry.out_shape(0)[-nd:]
        scales = list(sf) if sf is not None else [None] * nd
        return _resample(x, out_sizes, scales, kind, align)
    return rule


def _bwd(kind, nd, has_align):
    def rule(grad, output_size, input_size, *rest):
        if has_align:
            align, scales = rest[0], list(rest[1:])
        else:
            align, scales = False, list(rest)
        scales = (scales + [None] * nd)[:nd]
        x0 = jnp.zeros(tuple(input_size), grad.dtype)
        return vjp_of(lambda x: _resample(x, tuple(output_size), scales, kind, align), (x0,), grad)[0]
    return rule


for _name, _kind, _nd, _al in (
    ("upsample_nearest1d", "nearest", 1, False), ("upsample_nearest2d", "nearest", 2, False),
    ("upsample_nearest3d", "nearest", 3, False),
    ("_upsample_nearest_exact1d", "nearest-exact", 1, False), ("_upsample_nearest_exact2d", "nearest-exact", 2, False),
    ("_upsample_nearest_exact3d", "nearest-exact", 3, False),
    ("upsample_linear1d", "linear", 1, True), ("upsample_bilinear2d", "linear", 2, True),
    ("upsample_trilinear3d", "linear", 3, True), ("upsample_bicubic2d", "cubic", 2, True),
):
    lower(f"{_name}.default")(_fwd(_kind, _nd, _al))
    lower(f"{_name}.vec")(_fwd_vec(_kind, _nd, _al))
    lower(f"{_name}_backward.default")(_bwd(_kind, _nd, _al))


# -- adaptive max pooling ----------------------------------------------------

def _adaptive_bins(in_size, out_size):
    starts = (np.arange(out_size) * in_size) // out_size
    ends = -((-(np.arange(out_size) + 1) * in_size) // out_size)
    return starts, ends


def _adaptive_max(x, out_sizes):
    """-> (values, flat indices into the pooled spatial dims), PyTorch's bins."""
    nd = len(out_sizes)
    sp = x.shape[-nd:]
    lead = x.shape[:-nd]
    # window offsets: every bin is at most kmax wide along each axis
    grids = []
    for k in range(nd):
        s, e = _adaptive_bins(sp[k], out_sizes[k])
        kmax = int((e - s).max())
        off = np.arange(kmax)
        idx = s[:, None] + off[None, :]              # [out, kmax]
        valid = idx < e[:, None]
        grids.append((np.minimum(idx, sp[k] - 1), valid, kmax))
    # build the full gather index over the flattened spatial dims
    flat_idx = np.zeros((), np.int64)
    valid = np.ones((), bool)
    stride = 1
    strides = []
    for k in reversed(range(nd)):
        strides.insert(0, stride)
        stride *= sp[k]
    for k in range(nd):
        idx, val, kmax = grids[k]
        shape = [1] * (2 * nd)
        shape[k], shape[nd + k] = idx.shape
        flat_idx = flat_idx + (idx * strides[k]).reshape(shape)
        valid = valid & val.reshape(shape)
    flat_idx = np.broadcast_to(flat_idx, valid.shape)
    win = tuple(out_sizes) + tuple(g[2] for g in grids)
    xf = x.reshape(lead + (-1,))
    g = jnp.take(xf, jnp.asarray(flat_idx.reshape(-1)), axis=-1).reshape(lead + win)
    low = jnp.asarray(-jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min, x.dtype)
    g = jnp.where(jnp.asarray(valid), g, low)
    g = g.reshape(lead + tuple(out_sizes) + (-1,))
    # NaN wins, as in PyTorch
    if jnp.issubdtype(x.dtype, jnp.floating):
        isn = jnp.isnan(g)
        am = jnp.where(jnp.any(isn, axis=-1), jnp.argmax(isn, axis=-1), jnp.argmax(g, axis=-1))
    else:
        am = jnp.argmax(g, axis=-1)
    vals = jnp.take_along_axis(g, am[..., None], axis=-1)[..., 0]
    fi = jnp.asarray(flat_idx.reshape(tuple(out_sizes) + (-1,)))
    fi = jnp.broadcast_to(fi, lead + fi.shape)
    idx = jnp.take_along_axis(fi, am[..., None], axis=-1)[..., 0]
    return vals, idx.astype(jnp.int64)


@lower("adaptive_max_pool2d", "adaptive_max_pool3d")
def _adaptive_max_pool(x, output_size):
    nd = len(output_size)
    out_sizes = ctx.entry.out_shape(0)[-nd:]
    return _adaptive_max(x, out_sizes)


@lower("adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward")
def _adaptive_max_pool_backward(grad, x, indices):
    nd = 2 if ctx.entry.name.startswith("adaptive_max_pool2d") else 3
    lead = x.shape[:-nd]
    n = int(np.prod(x.shape[-nd:]))
    g = grad.reshape(lead + (-1,))
    i = indices.reshape(lead + (-1,))
    out = jnp.zeros(lead + (n,), grad.dtype)
    grids = jnp.indices(i.shape, sparse=True)
    out = out.at[tuple(grids[:-1]) + (i,)].add(g)
    return out.reshape(x.shape)


# -- grid_sampler_2d -----------------------------------------------------------

def _reflect(c, twice_low, twice_high):
    if twice_low == twice_high:
        return jnp.zeros_like(c)
    mn = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = jnp.abs(c - mn)
    extra = jnp.fmod(c, span)
    flips = jnp.floor(c / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + mn, span - extra + mn)


def _grid_coord(c, size, padding_mode, align_corners):
    """Unnormalized, padded source coordinate (PyTorch's grid_sampler_compute_source_index)."""
    if align_corners:
        c = (c + 1) / 2 * (size - 1)
    else:
        c = ((c + 1) * size - 1) / 2
    return _pad_coord(c, size, padding_mode, align_corners)


def _pad_coord(c, size, padding_mode, align_corners):
    if padding_mode == 1:  # border
        c = jnp.clip(c, 0, size - 1)
    elif padding_mode == 2:  # reflection
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = jnp.clip(c, 0, size - 1)
    return c


def _gather2d(x, iy, ix):
    """x [N, C, H, W], integer iy/ix [N, Ho, Wo] -> [N, C, Ho, Wo]; zero outside."""
    N, C, H, W = x.shape
    valid = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
    flat = (jnp.clip(iy, 0, H - 1) * W + jnp.clip(ix, 0, W - 1)).reshape(N, 1, -1)
    g = jnp.take_along_axis(x.reshape(N, C, H * W), jnp.broadcast_to(flat, (N, C, flat.shape[-1])), axis=2)
    g = g.reshape((N, C) + iy.shape[1:])
    return jnp.where(valid[:, None], g, jnp.zeros((), x.dtype))


def _grid_sample_2d(x, grid, mode, padding_mode, align_corners):
    N, C, H, W = x.shape
    gx = grid[..., 0].astype(x.dtype)
    gy = grid[..., 1].astype(x.dtype)
    if mode == 2:  # bicubic: taps around the unpadded coordinate, padding per tap
        if align_corners:
            fx, fy = (gx + 1) / 2 * (W - 1), (gy + 1) / 2 * (H - 1)
        else:
            fx, fy = ((gx + 1) * W - 1) / 2, ((gy + 1) * H - 1) / 2
        x0, y0 = jnp.floor(fx), jnp.floor(fy)
        tx, ty = fx - x0, fy - y0
        wx = _cubic_weights(tx)
        wy = _cubic_weights(ty)
        out = 0
        for i in range(4):
            yy = _pad_coord(y0 - 1 + i, H, padding_mode, align_corners).astype(jnp.int32)
            row = 0
            for j in range(4):
                xx = _pad_coord(x0 - 1 + j, W, padding_mode, align_corners).astype(jnp.int32)
                row = row + _gather2d(x, yy, xx) * wx[j][:, None]
            out = out + row * wy[i][:, None]
        return out
    fx = _grid_coord(gx, W, padding_mode, align_corners)
    fy = _grid_coord(gy, H, padding_mode, align_corners)
    if mode == 1:  # nearest, round half to even
        return _gather2d(x, jnp.round(fy).astype(jnp.int32), jnp.round(fx).astype(jnp.int32))
    x0, y0 = jnp.floor(fx), jnp.floor(fy)
    wx1, wy1 = fx - x0, fy - y0
    wx0, wy0 = 1 - wx1, 1 - wy1
    x0i, y0i = x0.astype(jnp.int32), y0.astype(jnp.int32)
    out = (_gather2d(x, y0i, x0i) * (wy0 * wx0)[:, None] + _gather2d(x, y0i, x0i + 1) * (wy0 * wx1)[:, None]
           + _gather2d(x, y0i + 1, x0i) * (wy1 * wx0)[:, None] + _gather2d(x, y0i + 1, x0i + 1) * (wy1 * wx1)[:, None])
    return out


@lower("grid_sampler_2d")
def _grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample_2d(x, grid, interpolation_mode, padding_mode, align_corners).astype(out_dtype())


@lower("grid_sampler_2d_backward")
def _grid_sampler_2d_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    gx, gg = vjp_of(lambda a, g: _grid_sample_2d(a, g, interpolation_mode, padding_mode, align_corners), (x, grid), grad)
    return (gx if output_mask[0] else None), gg.astype(grid.dtype)
