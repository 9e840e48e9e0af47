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
  (49 / 7 = 7.0000005, and floor(-30.75 / -30.75) = 0). XLA:GPU's float32
  division itself is approximate: there it runs in float64.
- `floor_divide` / `trunc_divide`: eager's float algorithms (fmod based, which
  also decide inf // 1 = nan and 0.5 // -inf = -1).
- `opmath`: eager computes float16 / bfloat16 math in float32 and rounds once
  (at::opmath_type); these helpers do the same.
- `power` / `log_operand`: XLA's simplifier rewrites log(pow(a, b)) into
  b * log(|a|) (select(b == 0, 0, ...)), wrong for a negative base (eager:
  log(pow(-1.5, 1.0)) is nan). A log whose operand is a power this graph computes
  reads it through a no-op reduce-precision on CPU (an optimization barrier
  elsewhere), which the rewrite does not look through; no other op pays anything.
- `truthy`: x != 0 read from the bits for floats. XLA:CPU executes with the
  processor's denormals-are-zero and flush-to-zero modes on (the PJRT CPU client
  sets them around every execution; no compile option or XLA flag turns them
  off), so a subnormal compares equal to 0 there: `bool(-1e-38)` would be False.
  Arithmetic on subnormals stays flushed (`0 / -1e-38` is nan, not -0.0).
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax

from ..base.dtypes import to_jax
from .context import ctx

HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
_NUMBER = (bool, int, float, complex)


def opmath_dtype(dt):
    """The dtype eager computes `dt` math in: float32 for the half types."""
    return jnp.dtype(jnp.float32) if jnp.dtype(dt) in HALF else jnp.dtype(dt)


def up(x):
    """x in its opmath dtype (float32 for half-precision arrays; others unchanged)."""
    if isinstance(x, _NUMBER) or x.dtype not in HALF:
        return x
    return x.astype(jnp.float32)


def _has_half(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            if _has_half(a):
                return True
        elif getattr(a, "dtype", None) in HALF:
            return True
    return False


def _up_all(a):
    if isinstance(a, (list, tuple)):
        return type(a)(_up_all(x) for x in a)
    return up(a) if hasattr(a, "dtype") else a


def opmath(rule):
    """A rule run as eager runs the op on half types: float16 / bfloat16 array
    arguments in float32, each output rounded once to the op's output dtype (the
    rule's own steps would otherwise round, or not, as XLA fuses them). Rules
    without half arguments run unchanged."""
    @functools.wraps(rule)
    def run(*args, **kwargs):
        if not (_has_half(args) or _has_half(kwargs.values())):
            return rule(*args, **kwargs)
        out = rule(*_up_all(args), **{k: _up_all(v) for k, v in kwargs.items()})
        avals = ctx.entry.out_avals
        if isinstance(out, (list, tuple)):
            return type(out)(o if o is None else cast(o, to_jax(avals[i][1])) for i, o in enumerate(out))
        return cast(out, to_jax(avals[0][1]))
    return run


def cast(x, dt):
    """x (array or Python number) as dtype dt; a bool array becomes 0/1 by a select
    (see the module docstring), never by a bare convert; a float array becomes
    bool by its bits (`truthy`)."""
    dt = jnp.dtype(dt)
    if isinstance(x, _NUMBER):
        return jnp.asarray(x, dt)
    if x.dtype == dt:
        return x
    if x.dtype == jnp.bool_ and dt != jnp.bool_:
        return jnp.where(x, jnp.ones((), dt), jnp.zeros((), dt))
    if dt == jnp.bool_:
        return truthy(x)
    return x.astype(dt)


_UINT = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def truthy(x):
    """x != 0 as a bool array (a Python number: a bool array of one element).
    Floats by their bits, the sign bit shifted out: a subnormal is true and -0.0
    false, as in eager, under XLA:CPU's denormals-are-zero mode too. That holds
    for a value read from memory (an input, a value the graph stored): LLVM turns
    the bit test of a float it computes in registers back into a float compare
    (seen after abs and neg), and arithmetic flushes its subnormal results anyway."""
    if isinstance(x, _NUMBER):
        return jnp.asarray(bool(x))
    if x.dtype == jnp.bool_:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return truthy(jnp.real(x)) | truthy(jnp.imag(x))
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize in _UINT:
        bits = lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize])
        return (bits << jnp.ones((), bits.dtype)) != jnp.zeros((), bits.dtype)
    return x != 0


def true_divide(a, b, opaque=False):
    """a / b for float or complex operands of one dtype, rounded once as eager's
    division is. A divisor that will be broadcast passes through an optimization
    barrier (it is small, and no longer a constant the simplifier could invert),
    its size-1 dims dropped first so that the broadcast reads the barrier's output
    itself; a second use of that output (the quotient is nan where the divisor
    is) keeps the CPU rewrite, which needs a broadcast operand of one use, from
    matching. A full-shape divisor gets the second use alone. `opaque`: the barrier
    whatever the divisor's shape (one the rule builds from constants, such as a
    pooling window's element counts). A Python number stays as it is: 0 and 1
    give exact products."""
    if ctx.platform == "cuda" and jnp.result_type(a, b) == _F32 and jax.config.jax_enable_x64:
        return _divide_in_float64(a, b)
    if isinstance(b, _NUMBER):
        return a / b
    if isinstance(a, _NUMBER):
        a = jnp.asarray(a, b.dtype)
    out = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    real = jnp.issubdtype(jnp.result_type(a, b), jnp.floating)
    if not opaque and jnp.shape(b) == out:
        q = a / b
        return jnp.where(jnp.isnan(b), b.astype(q.dtype), q) if real else q
    shape = (1,) * (len(out) - b.ndim) + tuple(b.shape)
    keep = tuple(i for i, d in enumerate(shape) if d != 1)
    core = lax.optimization_barrier(b.reshape(tuple(shape[i] for i in keep)))
    wide = lax.broadcast_in_dim(core, out, keep)
    q = jnp.broadcast_to(a, out) / wide
    if real:
        q = jnp.where(lax.broadcast_in_dim(jnp.isnan(core), out, keep), wide.astype(q.dtype), q)
    return q


_F32, _F64 = jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)


def _divide_in_float64(a, b):
    """float32 a / b, correctly rounded, through float64. XLA:GPU divides float32
    within 2 ulps (PTX's approximate division), and LLVM turns a float64 quotient
    of widened float32 values that is rounded back into that same float32
    division. A float64 product with the float64 reciprocal is left alone, and
    rounds to the correctly rounded float32 quotient: its error (2^-52 relative)
    is below the distance of a quotient of float32 values from a float32
    rounding midpoint (2^-49)."""
    wide = [jnp.asarray(x, _F32).astype(_F64) for x in (a, b)]
    return (wide[0] * (1.0 / wide[1])).astype(_F32)


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


def power(a, b):
    """jnp.power(a, b), remembered (while a graph is lowered) as a power a log may
    read: see `log_operand`."""
    out = jnp.power(a, b)
    if ctx.powers is not None:
        ctx.powers[id(out)] = out
    return out


_PRECISION_BITS = {jnp.dtype(jnp.float32): (8, 23), jnp.dtype(jnp.float64): (11, 52)}


def log_operand(x):
    """x as a log should read it: a power of this graph (`power`) through a no-op
    reduce-precision on CPU, an optimization barrier elsewhere and for complex, so
    that XLA keeps log(pow(a, b)) as written."""
    seen = ctx.powers
    if not seen or seen.get(id(x)) is not x:
        return x
    bits = _PRECISION_BITS.get(x.dtype)
    if bits is not None and ctx.platform in (None, "cpu"):
        # XLA:GPU's simplifier removes a no-op reduce-precision first; the barrier holds there
        return lax.reduce_precision(x, *bits)
    return lax.optimization_barrier(x)
