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


@lower("addmm", "addmv", "addbmm")
def _addmm(bias, a, b, beta=1, alpha=1):
    dt = _od()
    prod = _mm(a, b)
    if prod.ndim == 3:
        prod = prod.sum(0)
    out = prod if alpha == 1 else prod * jnp.asarray(alpha, dt)
    if isinstance(beta, (int, float)) and beta == 0:
        return out
    return out + (bias.astype(dt) if beta == 1 else bias.astype(dt) * jnp.asarray(beta, dt))


@lower("baddbmm")
def _baddbmm(bias, a, b, beta=1, alpha=1):
    dt = _od()
    prod = _mm(a, b)
    out = prod if alpha == 1 else prod * jnp.asarray(alpha, dt)
    if isinstance(beta, (int, float)) and beta == 0:
        return out
    return out + (bias.astype(dt) if beta == 1 else bias.astype(dt) * jnp.asarray(beta, dt))


@lower("outer", "ger")
def _outer(a, b):
    dt = _od()
    return jnp.outer(a.astype(dt), b.astype(dt))
