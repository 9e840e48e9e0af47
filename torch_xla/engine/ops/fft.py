"""FFT rules: the three aten primitives every torch.fft function reduces to.

`normalization` is PyTorch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n,
applied in either direction; the JAX transforms below are all unscaled and
the scale is applied here.
"""
import math

import jax.numpy as jnp

from .registry import ctx, lower


def _scale(y, n, normalization):
    if normalization == 1:
        return y * jnp.asarray(1.0 / math.sqrt(n), y.real.dtype)
    if normalization == 2:
        return y * jnp.asarray(1.0 / n, y.real.dtype)
    return y


def _n(shape, dims):
    return int(math.prod(shape[d] for d in dims)) if dims else 1


def _axes(x, dim):
    return [d % x.ndim for d in dim]


@lower("_fft_r2c")
def _fft_r2c(x, dim, normalization, onesided):
    axes = _axes(x, dim)
    if not axes:
        return x.astype(ctx.entry.out_dtype(0))
    y = jnp.fft.rfftn(x, axes=axes) if onesided else jnp.fft.fftn(x, axes=axes)
    return _scale(y, _n(x.shape, axes), normalization).astype(ctx.entry.out_dtype(0))


@lower("_fft_c2c")
def _fft_c2c(x, dim, normalization, forward):
    axes = _axes(x, dim)
    if not axes:
        return x
    y = jnp.fft.fftn(x, axes=axes) if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scale(y, _n(x.shape, axes), normalization).astype(ctx.entry.out_dtype(0))


@lower("_fft_c2r")
def _fft_c2r(x, dim, normalization, last_dim_size):
    axes = _axes(x, dim)
    out_shape = ctx.entry.out_shape(0)
    s = [out_shape[a] for a in axes]
    y = jnp.fft.irfftn(x, s=s, axes=axes, norm="forward")
    return _scale(y, _n(out_shape, axes), normalization).astype(ctx.entry.out_dtype(0))
