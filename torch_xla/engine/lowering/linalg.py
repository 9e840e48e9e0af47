"""Matrix products. Accumulation follows the output dtype (ctx)."""
import jax.numpy as jnp
from jax import lax

from .registry import ctx, lower


def _od():
    return ctx.entry.out_dtype(0)


def _prec(dt):
    # full float32 precision on GPU/TPU too: PyTorch's default for matmul parity
    return lax.Precision.HIGHEST if dt == jnp.float32 else None


def _mm(a, b):
    dt = _od()
    return jnp.matmul(a.astype(dt), b.astype(dt), precision=_prec(dt))


lower("mm", "bmm", "matmul", "dot", "mv", "vdot", "inner")(lambda a, b: _mm(a, b) if a.ndim and b.ndim else a * b)


def _is(v, c):
    """v is the Python number c (traced scalar operands never are)."""
    return isinstance(v, (int, float)) and v == c


def _scaled_sum(prod, bias, beta, alpha, dt):
    out = prod if _is(alpha, 1) else prod * jnp.asarray(alpha, dt)
    if _is(beta, 0):  # beta == 0 ignores bias (even NaN), as PyTorch does
        return out
    return out + (bias.astype(dt) if _is(beta, 1) else bias.astype(dt) * jnp.asarray(beta, dt))


@lower("addmm", "addmv", "addbmm")
def _addmm(bias, a, b, beta=1, alpha=1):
    dt = _od()
    prod = _mm(a, b)
    if prod.ndim == 3:
        prod = prod.sum(0)
    return _scaled_sum(prod, bias, beta, alpha, dt)


@lower("baddbmm")
def _baddbmm(bias, a, b, beta=1, alpha=1):
    dt = _od()
    return _scaled_sum(_mm(a, b), bias, beta, alpha, dt)


@lower("addr")
def _addr(bias, a, b, beta=1, alpha=1):
    dt = _od()
    prod = jnp.outer(a.astype(dt), b.astype(dt))
    if dt == jnp.bool_:
        out = prod if _is(alpha, 1) else prod & jnp.asarray(alpha, dt)
        return out if _is(beta, 0) else out | (bias.astype(dt) & jnp.asarray(beta, dt))
    return _scaled_sum(prod, bias, beta, alpha, dt)


@lower("outer", "ger")
def _outer(a, b):
    dt = _od()
    return jnp.outer(a.astype(dt), b.astype(dt))
