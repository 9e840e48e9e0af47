"""Elementwise rules: arithmetic, comparisons, unary math, where/clamp, casts.

PyTorch decides result dtypes (ctx.entry.out_avals, from its meta kernels);
arithmetic runs in the output dtype, comparisons in PyTorch's common dtype.
"""
import math

import jax
import jax.numpy as jnp
from jax import lax

from ..base.dtypes import to_jax
from . import numerics as nx
from .context import out_dtype
from .registry import ctx, lower, vjp_of



def _cd():
    c = ctx.entry.common_dtype
    return to_jax(c) if c is not None else None


_as = nx.cast   # bool -> number by a select: XLA's simplifier would make 0 * inf of a convert 0


def _is_float(dt):
    return jnp.issubdtype(dt, jnp.inexact)


def _wide(x):
    """For special functions whose float32 series in JAX drift up to ~1e-5
    relative (digamma, polygamma, zeta) where eager is within an ulp: on CPU and
    GPU they run in float64 and round once. TPU has no float64."""
    if ctx.platform == "tpu" or not jax.config.jax_enable_x64:
        return x
    return x.astype(jnp.float64) if x.dtype == jnp.float32 else x


def _in_float64(fn):
    """fn computed as `_wide` says, rounded back: for XLA's float32 exp2, sinh and
    cosh, whose error grows with |x| (exp of a rounded product or sum: 24 ulps
    at sinh(35)) where eager's is within an ulp."""
    return lambda x: fn(_wide(x)).astype(x.dtype)


# -- arithmetic -------------------------------------------------------------

def _operands(a, b, exact_scalar=True):
    """(a, b, dt, ct): the operands of a binary arithmetic op in ct, the dtype eager
    computes it in; dt is the output dtype. Half outputs compute in float32 and
    round once (opmath); with `exact_scalar` (mul, div), a one-element second
    operand keeps its own precision there, as eager's CPU kernels read it
    unrounded (TensorIterator's original_scalar_value: `f16_t / 3.3` divides by
    3.3, not by f16(3.3)); add and sub read it converted to the half type
    (`scalar_value`: `f16_t - 0.5413` subtracts f16(0.5413))."""
    dt = out_dtype()
    if dt not in nx.HALF:
        return _as(a, dt), _as(b, dt), dt, dt
    ct = jnp.dtype(jnp.float32)
    a = _as(_as(a, dt), ct)
    if exact_scalar and (isinstance(b, (int, float, bool)) or b.size == 1):
        b = _as(b, ct)
    else:
        b = _as(_as(b, dt), ct)
    return a, b, dt, ct


def _scaled(b, alpha, dt, ct):
    if isinstance(alpha, (int, float)) and alpha == 1:
        return b
    return b * _as(_as(alpha, dt), ct)   # eager rounds alpha to the tensors' dtype


@lower("add.Tensor", "add.Scalar")
def _add(a, b, alpha=1):
    a, b, dt, ct = _operands(a, b, exact_scalar=False)
    if dt == jnp.bool_:
        return a | (b & _as(alpha, dt))
    return _as(a + _scaled(b, alpha, dt, ct), dt)


@lower("sub.Tensor", "sub.Scalar")
def _sub(a, b, alpha=1):
    a, b, dt, ct = _operands(a, b, exact_scalar=False)
    return _as(a - _scaled(b, alpha, dt, ct), dt)


@lower("rsub.Tensor", "rsub.Scalar")
def _rsub(a, b, alpha=1):
    return _sub(b, a, alpha)


@lower("mul.Tensor", "mul.Scalar")
def _mul(a, b):
    a, b, dt, _ = _operands(a, b)
    if dt == jnp.bool_:
        return a & b
    return _as(a * b, dt)


def _quotient(a, b, fn, half_steps=False):
    """fn(a, b) rounded to the output dtype. Half types: in float32 (eager's opmath)
    for true division and wherever the divisor is one element; eager's floor and
    trunc division of two half tensors round every step to the half type
    (`half_steps`)."""
    dt = out_dtype()
    if half_steps and dt in nx.HALF and not (isinstance(b, (int, float, bool)) or b.size == 1):
        return fn(_as(a, dt), _as(b, dt))
    a, b, dt, _ = _operands(a, b)
    return _as(fn(a, b), dt)


@lower("div.Tensor", "div.Scalar", "true_divide.Tensor", "true_divide.Scalar")
def _div(a, b):
    return _quotient(a, b, nx.true_divide)


@lower("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(a, b, rounding_mode=None):
    dt = out_dtype()
    if rounding_mode is None:
        return _div(a, b)
    if _is_float(dt):
        return _quotient(a, b, nx.trunc_divide if rounding_mode == "trunc" else nx.floor_divide, half_steps=True)
    a, b = _as(a, dt), _as(b, dt)
    if rounding_mode == "trunc":
        a, b = jnp.broadcast_arrays(a, b)   # lax.div does not broadcast
        return lax.div(a, b)
    return jnp.floor_divide(a, b)


@lower("floor_divide", "floor_divide.Scalar")
def _floor_divide(a, b):
    return _div_mode(a, b, "floor")


def _pow_by_squaring(a, e):
    """a ** e for integers, e >= 0, by squaring over every bit of e: products wrap
    modulo 2**bits as eager's loop's do (2 ** 64 == 0 in int64). jnp.power stops
    after six bits of the exponent (2 ** 64 gave 1)."""
    acc = jnp.ones(jnp.broadcast_shapes(a.shape, e.shape), a.dtype)
    one = jnp.ones((), e.dtype)
    for _ in range(jnp.iinfo(e.dtype).bits):
        acc = jnp.where((e & one) == one, acc * a, acc)
        a = a * a
        e = e >> one
    return acc


def _int_pow(a, b):
    """Integer power as PyTorch computes it: negative exponents give 0 unless
    the base is 1 or -1."""
    b = jnp.asarray(b, a.dtype) if isinstance(b, (int, bool)) else b
    pos = _pow_by_squaring(a, jnp.maximum(b, 0))
    if a.dtype == jnp.bool_ or jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return pos
    one = jnp.ones((), a.dtype)
    neg = jnp.where(a == 1, one, jnp.where(a == -1, jnp.where(b % 2 == 0, one, -one), jnp.zeros((), a.dtype)))
    return jnp.where(b < 0, neg, pos)


# a Python exponent is part of the program, as upstream's constant: x ** 2 becomes
# x * x (integer_pow) and x ** 0.5 a square root, instead of a general pow of a
# runtime value; a loop that changes the exponent every step would recompile
@lower("pow.Tensor_Scalar", static=("exponent",))
@lower("pow.Tensor_Tensor", "pow.Scalar")
def _pow(a, b):
    dt = out_dtype()
    if dt in nx.HALF:   # eager: in float32, rounded once (x ** 3 is two products)
        ct = jnp.dtype(jnp.float32)
        a = _as(_as(a, dt), ct)
        if isinstance(b, int) and not isinstance(b, bool):
            return _as(lax.integer_pow(a, b), dt)
        b = _as(b, ct) if isinstance(b, (int, float, bool)) or b.size == 1 else _as(_as(b, dt), ct)
        return _as(jnp.power(a, b), dt)
    if isinstance(b, int) and not isinstance(b, bool) and (b >= 0 or _is_float(dt)):
        return lax.integer_pow(_as(a, dt), b)
    a, b = _as(a, dt), _as(b, dt)
    if dt == jnp.bool_:
        return a | ~b
    if not _is_float(dt) and not jnp.issubdtype(dt, jnp.complexfloating):
        return _int_pow(a, b)
    return nx.power(a, b)


def _in_opmath(*xs):
    """xs in the output dtype, then in the dtype eager computes it in (float32 for
    the half types); -> (values..., output dtype, compute dtype)."""
    dt = out_dtype()
    ct = nx.opmath_dtype(dt)
    return tuple(_as(_as(x, dt), ct) for x in xs) + (dt, ct)


@lower("lerp.Scalar", "lerp.Tensor")
def _lerp(a, b, w):
    # eager's formula: from the nearer end, so that w == 1 gives b exactly; a Python
    # weight at its own precision (lerp.Tensor's weight has the tensors' dtype)
    a, b, dt, ct = _in_opmath(a, b)
    w = _as(w, ct)
    small = jnp.abs(w) < 0.5
    one = jnp.ones((), w.dtype)
    return _as(jnp.where(small, a + w * (b - a), b - (b - a) * (one - w)), dt)


@lower("addcmul")
def _addcmul(x, t1, t2, value=1):
    x, t1, t2, dt, ct = _in_opmath(x, t1, t2)
    return _as(x + _as(value, ct) * t1 * t2, dt)


@lower("addcdiv")
def _addcdiv(x, t1, t2, value=1):
    x, t1, t2, dt, ct = _in_opmath(x, t1, t2)
    return _as(x + _as(value, ct) * nx.true_divide(t1, t2), dt)


# -- bitwise / logical -------------------------------------------------------

def _binary_same(fn, opmath=False):
    """fn on both operands cast to the output dtype; `opmath`: half types computed in
    float32 and rounded once, as eager does for functions that are not exact."""
    def rule(a, b):
        dt = out_dtype()
        if opmath and dt in nx.HALF:
            a, b, dt, ct = _in_opmath(a, b)
            return _as(fn(a, b), dt)
        return fn(_as(a, dt), _as(b, dt))
    return rule


for _names, _fn in (
    (("bitwise_and.Tensor", "bitwise_and.Scalar", "__and__.Tensor", "__and__.Scalar"), jnp.bitwise_and),
    (("bitwise_or.Tensor", "bitwise_or.Scalar", "__or__.Tensor", "__or__.Scalar"), jnp.bitwise_or),
    (("bitwise_xor.Tensor", "bitwise_xor.Scalar", "__xor__.Tensor", "__xor__.Scalar"), jnp.bitwise_xor),
    (("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar", "__lshift__.Tensor", "__lshift__.Scalar"), jnp.left_shift),
    (("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar", "__rshift__.Tensor", "__rshift__.Scalar"), jnp.right_shift),
    (("gcd",), jnp.gcd),
    (("lcm",), jnp.lcm),
):
    lower(*_names)(_binary_same(_fn))


def _logical(fn):
    def rule(a, b):
        return fn(_as(a, jnp.bool_) if not isinstance(a, bool) else a, _as(b, jnp.bool_) if not isinstance(b, bool) else b)
    return rule


lower("logical_and")(lambda a, b: _as(nx.truthy(a) & nx.truthy(b), out_dtype()))
lower("logical_or")(lambda a, b: _as(nx.truthy(a) | nx.truthy(b), out_dtype()))
lower("logical_xor")(lambda a, b: _as(nx.truthy(a) ^ nx.truthy(b), out_dtype()))
lower("logical_not")(lambda a: _as(~nx.truthy(a), out_dtype()))
lower("bitwise_not")(lambda a: jnp.invert(a) if a.dtype != jnp.bool_ else ~a)


# -- comparisons -------------------------------------------------------------

def _compare(fn, zero_test=None):
    """`zero_test`: x == 0 / x != 0 against a Python zero, from the bits
    (nx.truthy; XLA:CPU's comparison would read a subnormal x as 0)."""
    def rule(a, b):
        dt = _cd()
        if dt is None:
            dt = jnp.result_type(a, b)
        if zero_test is not None and type(b) in (int, float) and b == 0 and _is_float(dt):
            return zero_test(nx.truthy(_as(a, dt)))
        return fn(_as(a, dt), _as(b, dt))
    return rule


for _n, _fn, _zt in (("eq", jnp.equal, jnp.logical_not), ("ne", jnp.not_equal, lambda t: t),
                     ("lt", jnp.less, None), ("le", jnp.less_equal, None),
                     ("gt", jnp.greater, None), ("ge", jnp.greater_equal, None)):
    lower(f"{_n}.Tensor", f"{_n}.Scalar")(_compare(_fn, _zt))
lower("isclose")(lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: jnp.isclose(
    a, _as(b, a.dtype), rtol=rtol, atol=atol, equal_nan=equal_nan))


# -- unary -------------------------------------------------------------------

_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def _unary(fn, float_only=True, exact=False):
    def rule(x):
        dt = out_dtype()
        if jnp.iscomplexobj(x) and not jnp.issubdtype(dt, jnp.complexfloating):
            return fn(x).astype(dt)  # abs/angle of complex: real result
        if not exact and dt in _HALF:
            # eager computes half-precision math in float32 and rounds once; JAX would
            # round after every step of a decomposed function (acos, sigmoid, i0, ...)
            return _as(fn(_as(_as(x, dt), jnp.float32)), dt)
        return fn(_as(x, dt))
    return rule


_UNARY = {
    "neg": jnp.negative, "abs": jnp.abs, "exp": jnp.exp, "exp2": _in_float64(jnp.exp2), "expm1": jnp.expm1,
    "log": lambda x: jnp.log(nx.log_operand(x)), "log2": lambda x: jnp.log2(nx.log_operand(x)),
    "log10": lambda x: jnp.log10(nx.log_operand(x)), "log1p": jnp.log1p, "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "asin": jnp.arcsin,
    "acos": jnp.arccos, "atan": jnp.arctan, "sinh": _in_float64(jnp.sinh), "cosh": _in_float64(jnp.cosh), "tanh": jnp.tanh,
    "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh, "arcsin": jnp.arcsin,
    "arccos": jnp.arccos, "arctan": jnp.arctan, "arcsinh": jnp.arcsinh, "arccosh": jnp.arccosh,
    "arctanh": jnp.arctanh, "sigmoid": jax.nn.sigmoid, "erf": jax.scipy.special.erf,
    "erfc": jax.scipy.special.erfc, "erfinv": jax.scipy.special.erfinv, "reciprocal": jnp.reciprocal,
    "floor": jnp.floor, "ceil": jnp.ceil, "trunc": jnp.trunc, "fix": jnp.trunc, "frac": lambda x: x - jnp.trunc(x),
    "square": jnp.square,
    # exactly 0 at 1 and 2, as eager's std::lgamma (JAX's series gives 4.8e-7 at 1 in float32)
    "lgamma": lambda x: jnp.where((x == 1) | (x == 2), jnp.zeros((), x.dtype), jax.scipy.special.gammaln(x)),
    "i0": jax.scipy.special.i0, "sinc": jnp.sinc,
    "deg2rad": jnp.deg2rad, "rad2deg": jnp.rad2deg, "positive": lambda x: x,
    "silu": jax.nn.silu, "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    # eager's order, (x * relu6(x + 3)) / 6, through a division the simplifier keeps
    "hardswish": lambda x: nx.true_divide(x * jax.nn.relu6(x + 3.0), jnp.asarray(6, x.dtype), opaque=True),
    "hardsigmoid": lambda x: nx.true_divide(jax.nn.relu6(x + 3.0), jnp.asarray(6, x.dtype), opaque=True),
    "relu6": jax.nn.relu6,
    "log_sigmoid": jax.nn.log_sigmoid, "selu": jax.nn.selu,
    "angle": jnp.angle, "conj_physical": jnp.conj, "special_erfcx": jax.scipy.special.erfcx
    if hasattr(jax.scipy.special, "erfcx") else None,
}
# results exact in any float width: no float32 detour for half inputs
_EXACT_UNARY = {"neg", "abs", "floor", "ceil", "trunc", "fix", "positive", "conj_physical", "angle"}
for _n, _fn in _UNARY.items():
    if _fn is not None:
        lower(_n)(_unary(_fn, exact=_n in _EXACT_UNARY))


@lower("relu")
def _relu(x):
    return jnp.maximum(x, jnp.zeros((), x.dtype))


@lower("sign")
def _sign(x):
    if x.dtype == jnp.bool_:
        return x
    if _is_float(x.dtype):   # eager: sign(nan) == 0 and sign(-0.0) == +0.0; XLA keeps both
        one = jnp.ones((), x.dtype)
        return jnp.where(x > 0, one, jnp.where(x < 0, -one, jnp.zeros((), x.dtype)))
    return jnp.sign(x)


@lower("digamma")
@nx.opmath
def _digamma(x):
    dt = nx.opmath_dtype(out_dtype())
    x = _as(x, dt)
    # PyTorch: -inf at 0 (JAX gives NaN there), NaN at negative integers
    inf = jnp.asarray(jnp.inf, dt)
    psi = _digamma_series(x) if dt == jnp.float32 else jax.scipy.special.digamma(x)
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), inf, -inf), psi)


# B_2k / 2k for the asymptotic series psi(x) ~ log x - 1/2x - sum_k B_2k / (2k x^2k), highest first
_PSI_ASYMPTOTIC = (1 / 12, -691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12)
_PSI_10 = 2.25175258906672110764   # digamma(10)


def _trigamma_series(x):
    """float32 trigamma the textbook way eager's kernel also goes (reflection
    below 1/2, six recurrence steps, the asymptotic series), so they round alike."""
    dt = x.dtype
    low = x < 0.5
    s = jnp.sin(jnp.asarray(jnp.pi, dt) * x)
    reflect = jnp.asarray(jnp.pi * jnp.pi, dt) / (s * s)
    y = jnp.where(low, 1 - x, x)
    acc = jnp.where(low, -reflect, jnp.zeros_like(x))
    for _ in range(6):   # psi1(y) = psi1(y + 1) + 1/y^2
        acc = acc + 1 / (y * y)
        y = y + 1
    z = 1 / (y * y)
    acc = acc + (1 + 1 / (2 * y) + z * (1 / 6 - z * (1 / 30 - z * (1 / 42)))) / y
    return jnp.where(low, -acc, acc)


def _zeta(x, q):
    """Hurwitz zeta with eager's domain: inf at x == 1, NaN for x < 1; for q <= 0,
    inf at integer q and NaN where q**-x is undefined (x not an integer)."""
    r = _sp.zeta(_wide(x), _wide(q)).astype(x.dtype)
    inf, nan = jnp.asarray(jnp.inf, x.dtype), jnp.asarray(jnp.nan, x.dtype)
    q_int = q == jnp.floor(q)
    r = jnp.where((q <= 0) & q_int, inf, r)
    r = jnp.where((q <= 0) & ~q_int & (x != jnp.floor(x)), nan, r)
    r = jnp.where(x < 1, nan, r)
    return jnp.where(x == 1, inf, r)


def _digamma_series(x):
    """float32 digamma by the textbook route eager's CPU kernel also takes
    (reflection below 0, the recurrence up to 10, the asymptotic series), so the
    two round alike; JAX's own float32 digamma differs by up to ~1e-5 relative."""
    dt = x.dtype
    neg = x < 0
    frac = x - jnp.trunc(x)
    # pi / tan(pi * frac) is better conditioned on the fractional part; in float64 where there is one
    wide = _wide(frac)
    reflect = (jnp.pi / jnp.tan(jnp.pi * wide)).astype(dt)
    y = jnp.where(neg, 1 - x, x)
    acc = jnp.zeros_like(y)
    for _ in range(10):   # y < 10 takes at most 10 steps of psi(y) = psi(y + 1) - 1/y
        small = y < 10
        acc = jnp.where(small, acc - 1 / y, acc)
        y = jnp.where(small, y + 1, y)
    z = 1 / (y * y)
    poly = jnp.zeros_like(z)
    for c in _PSI_ASYMPTOTIC:
        poly = poly * z + jnp.asarray(c, dt)
    tail = jnp.where(y < 1e17, z * poly, jnp.zeros_like(z))
    psi = jnp.where(y == 10, acc + jnp.asarray(_PSI_10, dt), acc + jnp.log(y) - 0.5 / y - tail)
    psi = jnp.where(neg, psi - reflect, psi)
    return jnp.where(neg & (x == jnp.trunc(x)), jnp.nan, psi)


@lower("sgn")
def _sgn(x):
    if x.dtype == jnp.bool_:
        return x
    if jnp.iscomplexobj(x):
        a = jnp.abs(x)
        return jnp.where(a == 0, 0, x / jnp.where(a == 0, 1, a))
    return _sign(x)


@lower("round", "round.decimals")
@nx.opmath
def _round(x, decimals=0):
    if not _is_float(x.dtype):
        return x
    return jnp.round(x, decimals)


def _gelu_formula(x, approximate):
    if approximate == "tanh":
        return jax.nn.gelu(x, approximate=True)
    return (0.5 * x * (1.0 + jax.scipy.special.erf(x / jnp.sqrt(jnp.asarray(2.0, x.dtype))))).astype(x.dtype)


@lower("gelu")
@nx.opmath
def _gelu(x, approximate="none"):
    return _gelu_formula(x, approximate)


@lower("gelu_backward")
@nx.opmath
def _gelu_backward(grad, x, approximate="none"):
    return vjp_of(lambda y: _gelu_formula(y, approximate), (x,), grad)[0]


@lower("leaky_relu")
@nx.opmath
def _leaky_relu(x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * _as(negative_slope, x.dtype))


@lower("elu")
@nx.opmath
def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    dt = x.dtype
    return jnp.where(x > 0, x * _as(scale, dt), _as(alpha, dt) * _as(scale, dt) * jnp.expm1(x * _as(input_scale, dt)))


@lower("celu")
@nx.opmath
def _celu(x, alpha=1.0):
    # eager's select keeps -0.0 (jax.nn.celu's max(x, 0) + ... gives +0.0)
    return jnp.where(x > 0, x, _as(alpha, x.dtype) * jnp.expm1(x / _as(alpha, x.dtype)))


@lower("softplus")
@nx.opmath
def _softplus(x, beta=1, threshold=20):
    dt = x.dtype
    bx = x * _as(beta, dt)
    return jnp.where(bx > _as(threshold, dt), x, jnp.log1p(jnp.exp(bx)) / _as(beta, dt))


@lower("hardtanh")
def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return jnp.clip(x, _as(min_val, x.dtype), _as(max_val, x.dtype))


@lower("threshold")
def _threshold(x, threshold, value):
    return jnp.where(x <= _as(threshold, x.dtype), _as(value, x.dtype), x)


@lower("threshold_backward")
def _threshold_backward(grad, x, threshold):
    return jnp.where(x <= _as(threshold, x.dtype), jnp.zeros((), grad.dtype), grad)


@lower("logit")   # in the input's type: eager's half kernel rounds x / (1 - x) before the log
def _logit(x, eps=None):
    dt = out_dtype()
    x = _as(x, dt)                      # integer inputs too (1 - x wrapped in uint8)
    if dt not in _HALF:
        if eps is not None:
            x = jnp.clip(x, eps, 1 - eps)
        return jnp.log(x / (1 - x))
    # half inputs as eager: the clamp and x / (1 - x) rounded to the dtype, the log in
    # float32 rounded once
    x = x.astype(jnp.float32)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps).astype(dt).astype(jnp.float32)
    r = (x / (1 - x).astype(dt).astype(jnp.float32)).astype(dt).astype(jnp.float32)
    return jnp.log(r).astype(dt)


@lower("nan_to_num")
def _nan_to_num(x, nan=None, posinf=None, neginf=None):
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


@lower("isnan")
def _isnan(x):
    return jnp.isnan(x) if _is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isinf")
def _isinf(x):
    return jnp.isinf(x) if _is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isfinite")
def _isfinite(x):
    return jnp.isfinite(x) if _is_float(x.dtype) else jnp.ones(x.shape, bool)


@lower("isneginf")
def _isneginf(x):
    return jnp.isneginf(x) if _is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("isposinf")
def _isposinf(x):
    return jnp.isposinf(x) if _is_float(x.dtype) else jnp.zeros(x.shape, bool)


@lower("signbit")
def _signbit(x):
    return jnp.signbit(x)


# -- selection ---------------------------------------------------------------

@lower("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(cond, a, b):
    dt = out_dtype()
    return jnp.where(nx.truthy(cond), _as(a, dt), _as(b, dt))


@lower("clamp", "clamp.Tensor")
def _clamp(x, min=None, max=None):  # noqa: A002
    dt = out_dtype()
    x = _as(x, dt)
    if min is not None:
        x = jnp.maximum(x, _as(min, dt))
    if max is not None:
        x = jnp.minimum(x, _as(max, dt))
    return x


@lower("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(x, mask, value):
    dt = out_dtype()
    return jnp.where(mask, _as(value, dt), _as(x, dt))


# -- copies and casts --------------------------------------------------------

@lower("clone", "_to_copy", "contiguous", "lift_fresh_copy", "_to_dense", "alias_copy", "detach_copy")
def _clone(x, *args, **kwargs):
    return _as(x, out_dtype())


@lower("fill.Scalar", "fill.Tensor")
def _fill(x, value):
    dt = out_dtype()
    return jnp.broadcast_to(_as(value, dt), x.shape)


@lower("zero")
def _zero(x):
    return jnp.zeros(x.shape, x.dtype)


@lower("copy")
def _copy(x, src, non_blocking=False):
    return jnp.broadcast_to(_as(src, x.dtype), x.shape)


@lower("real")
def _real(x):
    return jnp.real(x)


@lower("imag")
def _imag(x):
    return jnp.imag(x)


@lower("conj")
def _conj(x):
    return jnp.conj(x)


@lower("_conj", "_conj_copy", "_conj_physical")
def _conj_view(x):
    return jnp.conj(x)


@lower("_neg_view", "_neg_view_copy")
def _neg_view(x):
    return jnp.negative(x)


# -- special functions -------------------------------------------------------

_sp = jax.scipy.special


def _float_unary(fn):
    def rule(x):
        dt = out_dtype()
        ct = nx.opmath_dtype(dt)
        return fn(_as(_as(x, dt), ct)).astype(dt)
    return rule


for _n, _fn in (("special_i0e", _sp.i0e), ("special_i1", _sp.i1), ("special_i1e", _sp.i1e),
                ("special_ndtri", _sp.ndtri), ("special_log_ndtr", _sp.log_ndtr), ("special_ndtr", _sp.ndtr),
                ("special_erfcx", _sp.erfcx), ("special_entr", _sp.entr),
                ("special_modified_bessel_i0", _sp.i0), ("special_modified_bessel_i1", _sp.i1),
                ("special_spherical_bessel_j0",
                 lambda x: jnp.where(x == 0, jnp.ones((), x.dtype), jnp.sin(x) / jnp.where(x == 0, 1, x)))):
    lower(_n)(_float_unary(_fn))


@lower("polygamma")
@nx.opmath
def _polygamma(n, x):
    dt = nx.opmath_dtype(out_dtype())
    x = _as(x, dt)
    if n == 0:
        return _digamma(x)
    n = int(n)
    if n == 1 and dt == jnp.float32:
        return _trigamma_series(x)
    # JAX's series is only right for x > 0: shift negative x up with the
    # recurrence psi_n(x) = psi_n(x + k) - (-1)^n n! sum_{j<k} (x + j)^-(n+1)
    K = 64
    k = jnp.clip(jnp.ceil(-x), 0, K)
    j = jnp.arange(K, dtype=dt).reshape((K,) + (1,) * x.ndim)
    terms = jnp.where(j < k, (x + j) ** (-(n + 1)), jnp.zeros((), dt))
    sign_fact = (-1.0) ** n * math.factorial(n)
    return (_sp.polygamma(n, _wide(x + k)).astype(dt)
            - jnp.asarray(sign_fact, dt) * jnp.sum(terms, axis=0)).astype(dt)


@lower("frexp.Tensor")
def _frexp(x):
    m, e = jnp.frexp(x)
    return m, e.astype(ctx.entry.out_dtype(1))


@lower("mvlgamma")
@nx.opmath
def _mvlgamma(x, p):
    dt = nx.opmath_dtype(out_dtype())
    return _sp.multigammaln(_as(x, dt), p).astype(dt)


def _shrink_backward(grad, x, lambd):
    # zero inside [-lambd, lambd]; a NaN input keeps its gradient, as eager's scalar
    # loop does (its vectorized loop gives 0 there: eager disagrees with itself)
    lam = _as(lambd, x.dtype)
    return jnp.where((x >= -lam) & (x <= lam), jnp.zeros((), grad.dtype), grad)


lower("softshrink_backward")(_shrink_backward)
lower("hardshrink_backward")(_shrink_backward)


# Binary ops computed in PyTorch's result dtype: both operands cast to it, then one jnp call.
for _names, _fn in (
    (("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor",), jnp.remainder),
    (("fmod.Tensor", "fmod.Scalar",), jnp.fmod),
    (("maximum",), jnp.maximum),
    (("minimum",), jnp.minimum),
    (("fmax",), jnp.fmax),
    (("fmin",), jnp.fmin),
    (("copysign.Tensor", "copysign.Scalar",), jnp.copysign),
    (("clamp_min", "clamp_min.Tensor",), jnp.maximum),
    (("clamp_max", "clamp_max.Tensor",), jnp.minimum),
    (("nextafter",), jnp.nextafter),
    # eager rounds log(y) to the half type before the product
    (("xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other",), jax.scipy.special.xlogy),
    (("special_xlog1py", "special_xlog1py.other_scalar", "special_xlog1py.self_scalar",), _sp.xlog1py),
):
    lower(*_names)(_binary_same(_fn))
# not exact in the output precision: half types in float32, rounded once
for _names, _fn in (
    (("float_power.Tensor_Tensor", "float_power.Tensor_Scalar", "float_power.Scalar",), nx.power),
    (("atan2", "arctan2",), jnp.arctan2),
    (("hypot",), jnp.hypot),
    (("special_zeta", "special_zeta.other_scalar", "special_zeta.self_scalar",), lambda a, b: _zeta(a, b)),
    (("igamma",), _sp.gammainc),
    (("igammac",), _sp.gammaincc),
):
    lower(*_names)(_binary_same(_fn, opmath=True))
