"""Arithmetic the rule modules share where XLA, left alone, computes something
other than what eager PyTorch computes.

- `cast`: bool -> number through a select. XLA's algebraic simplifier rewrites
  `convert(pred) * y` into `select(pred, y, 0)` (and `convert(pred) /
  broadcast(y)` into that product): 0 * inf and 0 * nan become 0, where eager
  gives nan (`eye(1, 2) / 0.`, `bool_t / False`, a backward multiplying the
  gradient by a 0/1 mask).
- `true_divide`: a correctly rounded quotient. The simplifier turns `A / constant`
  into `A * (1 / constant)` on every platform, and on CPU `A / broadcast(B)` into
  `A * broadcast(1 / B)`: a product with a rounded reciprocal, an ulp off
  (49 / 7 = 7.0000005, and floor(-30.75 / -30.75) = 0).
- `floor_divide` / `trunc_divide`: eager's float algorithms (fmod based, which
  also decide inf // 1 = nan and 0.5 // -inf = -1).
- `opmath`: eager computes float16 / bfloat16 math in float32 and rounds once
  (at::opmath_type); these helpers do the same.
"""
import jax.numpy as jnp
from jax import lax

HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
_NUMBER = (bool, int, float, complex)


def is_half(dt):
    return jnp.dtype(dt) in HALF


def opmath_dtype(dt):
    """The dtype eager computes `dt` math in: float32 for the half types."""
    return jnp.dtype(jnp.float32) if jnp.dtype(dt) in HALF else jnp.dtype(dt)


def up(x):
    """x in its opmath dtype (float32 for half-precision arrays; others unchanged)."""
    if isinstance(x, _NUMBER) or x.dtype not in HALF:
        return x
    return x.astype(jnp.float32)


def cast(x, dt):
    """x (array or Python number) as dtype dt; a bool array becomes 0/1 by a select
    (see the module docstring), never by a bare convert."""
    dt = jnp.dtype(dt)
    if isinstance(x, _NUMBER):
        return jnp.asarray(x, dt)
    if x.dtype == dt:
        return x
    if x.dtype == jnp.bool_ and dt != jnp.bool_:
        return jnp.where(x, jnp.ones((), dt), jnp.zeros((), dt))
    return x.astype(dt)


def true_divide(a, b):
    """a / b for float or complex operands of one dtype, rounded once as eager's
    division is. A divisor that will be broadcast passes through an optimization
    barrier (it is small, and no longer a constant the simplifier could invert);
    a second use of the divisor (the quotient is nan where the divisor is) keeps
    the CPU rewrite, which needs a divisor of one use, from matching. A Python
    number stays as it is: 0 and 1 give exact products."""
    if isinstance(b, _NUMBER):
        return a / b
    if isinstance(a, _NUMBER):
        a = jnp.asarray(a, b.dtype)
    if jnp.shape(b) != jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b)):
        b = lax.optimization_barrier(b)
    q = a / b
    if jnp.issubdtype(q.dtype, jnp.floating):
        q = jnp.where(jnp.isnan(b), b.astype(q.dtype), q)
    return q


def floor_divide(a, b):
    """Eager's floor division of floats (c10 div_floor_floating): from fmod, so
    that the quotient is the exact floor even where a / b rounds up to an integer;
    b == 0 gives the IEEE quotient."""
    dt = a.dtype
    mod = jnp.fmod(a, b)
    div = true_divide(a - mod, b)
    zero = jnp.zeros((), dt)
    one = jnp.ones((), dt)
    div = jnp.where((mod != zero) & ((b < zero) != (mod < zero)), div - one, div)
    fl = jnp.floor(div)
    fl = jnp.where(div - fl > jnp.asarray(0.5, dt), fl + one, fl)
    q = true_divide(a, b)
    res = jnp.where(div != zero, fl, jnp.copysign(jnp.zeros_like(fl), q))
    return jnp.where(b == zero, q, res)


def trunc_divide(a, b):
    """Eager's truncating division of floats: trunc of the rounded quotient."""
    return jnp.trunc(true_divide(a, b))
