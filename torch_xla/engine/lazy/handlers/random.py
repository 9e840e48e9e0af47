"""The device random generator and random ops.

The generator state is one 63-bit running seed, kept on the host, as
upstream torch_xla keeps it: every random op takes the current seed and
advances it (a 64-bit LCG step), and draws from a JAX key made from the seed
it took. The seed reaches the graph as a scalar leaf, so reseeding or
stepping never recompiles. `torch.manual_seed`, `torch_xla.manual_seed` and
`xm.set_rng_state` set it; `xm.get_rng_state` reads it, so
`xm.set_rng_state(xm.get_rng_state())` replays the draws that follow.
"""
import jax
import jax.numpy as jnp
import torch

from ...base.dtypes import to_jax
from ...ir import node as ir
from ...ops.registry import handler
from ..dispatch import call
from ..tensor import new_base
from ..tracing import OpInfo, ValueArg, trace_node, wrap
from ..views import assign

_MASK = (1 << 63) - 1
_DEFAULT_SEED = 101  # upstream's default device seed


class _Rng:
    """seed: the running seed; initial: the last manual seed."""
    __slots__ = ("seed", "initial")

    def __init__(self):
        self.seed = _DEFAULT_SEED
        self.initial = _DEFAULT_SEED

    # older callers read/write (seed, offset) pairs; the offset is folded into the seed
    @property
    def offset(self):
        return 0

    @offset.setter
    def offset(self, value):
        if int(value):
            self.seed = advance(self.seed, int(value))


rng = _Rng()


def advance(seed, n=1):
    """The running seed n steps on (a 64-bit LCG step each)."""
    for _ in range(n):
        seed = (seed * 6364136223846793005 + 1442695040888963407) & _MASK
    return seed


def manual_seed(seed):
    seed = int(seed) & _MASK
    rng.seed = seed
    rng.initial = seed


def get_rng_state():
    return rng.seed


def set_rng_state(seed):
    rng.seed = int(seed) & _MASK


def take_seed():
    """The current seed, which a random op takes; the generator steps on."""
    s = rng.seed
    rng.seed = advance(s)
    return s


def _key(seed):
    # An RngBitGenerator key (XLA's own generator): a graph with a random op
    # compiles about 3x faster than with threefry, whose hash rounds are unrolled
    # into the program (0.14 s vs 0.46 s for a small graph on XLA:CPU), and the
    # bits drawn do not depend on how the result is sharded.
    return jax.random.key(seed.astype(jnp.int64), impl="unsafe_rbg")


def _seed_operand():
    # a forced scalar leaf: never a constant, whatever the value
    return ValueArg(ir.scalar_value(take_seed(), "int64"), ((), torch.int64))


# JAX sorts by 32-bit random keys in rounds, one round while 3 log n <= 32 log 2
# (ties, which keep index order, stay unlikely)
_ONE_ROUND_PERM = 1625


def _meta_shape(seed, *, shape, dtype, **kw):
    return torch.empty(shape, dtype=dtype, device="meta")


def _draw(kind):
    def lowering(seed, *, shape, dtype, a=0.0, b=1.0):
        key = _key(seed)
        jd = to_jax(dtype)
        if kind == "normal":
            cd = jd if jnp.issubdtype(jd, jnp.floating) else jnp.float32
            return (jax.random.normal(key, shape, cd) * b + a).astype(jd)
        if kind == "uniform":
            cd = jd if jnp.issubdtype(jd, jnp.floating) else jnp.float32
            return jax.random.uniform(key, shape, cd, minval=a, maxval=b).astype(jd)
        if kind == "randint":
            return jax.random.randint(key, shape, int(a), int(b), dtype=jnp.int64).astype(jd)
        if kind == "exponential":
            return (jax.random.exponential(key, shape, jnp.float32) / a).astype(jd)
        if kind == "perm":
            n = shape[0]
            if n <= _ONE_ROUND_PERM:
                # jax.random.permutation draws a subkey, then sorts by one round of
                # bits; drawing the bits from the op's own key is the same shuffle
                # with one RngBitGenerator fewer to compile
                bits = jax.random.bits(key, (n,), jnp.uint32)
                return jax.lax.sort((bits, jnp.arange(n, dtype=jd)), num_keys=1)[1]
            return jax.random.permutation(key, n).astype(jd)
        raise NotImplementedError(kind)
    return OpInfo(f"rng_{kind}", None, lowering, meta=_meta_shape)


_NORMAL, _UNIFORM, _RANDINT, _EXP, _PERM = (_draw(k) for k in ("normal", "uniform", "randint", "exponential", "perm"))


def _check_generator(name, kwargs, args=()):
    gen = kwargs.get("generator")
    if gen is None:
        for a in args:
            if isinstance(a, torch.Generator):
                gen = a
    if gen is not None:
        raise RuntimeError(
            f"torch_xla: aten::{name} got a torch.Generator; the XLA device has one generator, "
            f"seeded by torch.manual_seed / torch_xla.manual_seed / xm.set_rng_state. Drop the generator argument.")


def _sample(info, shape, dtype, **kw):
    s = _seed_operand()
    node, e = trace_node(info, (s,), dict(shape=tuple(shape), dtype=dtype, **kw))
    return (node, 0)


def _fill_inplace(t, v):
    assign(t, v)
    return t


@handler("normal_.default")
def _normal_(args, kwargs):
    _check_generator("normal_", kwargs, args)
    t = args[0]
    mean = args[1] if len(args) > 1 else kwargs.get("mean", 0.0)
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    return _fill_inplace(t, _sample(_NORMAL, t.shape, t.dtype, a=float(mean), b=float(std)))


@handler("uniform_.default")
def _uniform_(args, kwargs):
    _check_generator("uniform_", kwargs, args)
    t = args[0]
    lo = args[1] if len(args) > 1 else kwargs.get("from", 0.0)
    hi = args[2] if len(args) > 2 else kwargs.get("to", 1.0)
    return _fill_inplace(t, _sample(_UNIFORM, t.shape, t.dtype, a=float(lo), b=float(hi)))


@handler("exponential_.default")
def _exponential_(args, kwargs):
    _check_generator("exponential_", kwargs, args)
    t = args[0]
    lambd = args[1] if len(args) > 1 else kwargs.get("lambd", 1.0)
    return _fill_inplace(t, _sample(_EXP, t.shape, t.dtype, a=float(lambd)))


@handler("random_.from", "random_.to", "random_.default")
def _random_(args, kwargs):
    _check_generator("random_", kwargs, args)
    t = args[0]
    nums = [a for a in args[1:] if isinstance(a, int)]
    if "from" in kwargs:
        nums = [kwargs["from"]] + nums
    if "to" in kwargs and kwargs["to"] is not None:
        nums = nums + [kwargs["to"]]
    if len(nums) == 2:
        lo, hi = nums
    elif len(nums) == 1:
        lo, hi = 0, nums[0]
    else:
        lo = 0
        hi = 2 ** 24 if t.dtype.is_floating_point else (2 if t.dtype == torch.bool else torch.iinfo(t.dtype).max)
    if hi is None:
        hi = torch.iinfo(t.dtype).max if not t.dtype.is_floating_point else 2 ** 24
    return _fill_inplace(t, _sample(_RANDINT, t.shape, t.dtype, a=int(lo), b=int(hi)))


def _bernoulli_lowering(seed, p, *, shape, dtype):
    key = _key(seed)
    u = jax.random.uniform(key, shape, jnp.float32)
    return (u < p.astype(jnp.float32)).astype(to_jax(dtype))


def _bern_meta(seed, p, *, shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


_BERN = OpInfo("rng_bernoulli", None, _bernoulli_lowering, meta=_bern_meta)


def _bernoulli_value(shape, dtype, p):
    s = _seed_operand()
    if not isinstance(p, torch.Tensor):
        p = ValueArg(ir.scalar_value(float(p), "float64"), ((), torch.float64))
    node, e = trace_node(_BERN, (s, p), dict(shape=tuple(shape), dtype=dtype))
    return (node, 0)


@handler("bernoulli_.float", "bernoulli_.Tensor")
def _bernoulli_(args, kwargs):
    _check_generator("bernoulli_", kwargs, args)
    t = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return _fill_inplace(t, _bernoulli_value(t.shape, t.dtype, p))


@handler("bernoulli.default", "bernoulli.p")
def _bernoulli(args, kwargs):
    _check_generator("bernoulli", kwargs, args)
    x = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", x)
    return new_base(_bernoulli_value(x.shape, x.dtype, p), x._lazy.aval)


def _dropout_lowering(seed, x, p, *, train):
    key = _key(seed)
    keep = jax.random.uniform(key, x.shape, jnp.float32) >= p.astype(jnp.float32)
    scale = (1.0 / (1.0 - p.astype(jnp.float32))).astype(x.dtype)
    return jnp.where(keep, x * scale, jnp.zeros((), x.dtype)), keep


def _dropout_meta(seed, x, p, *, train):
    return torch.empty_like(x), torch.empty(x.shape, dtype=torch.bool, device="meta")


_DROPOUT = OpInfo("native_dropout", None, _dropout_lowering, meta=_dropout_meta)


@handler("native_dropout.default")
def _native_dropout(args, kwargs):
    x, p = args[0], args[1]
    train = args[2] if len(args) > 2 else kwargs.get("train", True)
    if train is False or p == 0:
        return call(torch.ops.aten.clone.default, (x,), {}), new_base(
            _const_mask(x), (x._lazy.aval[0], torch.bool))
    if p >= 1:
        return call(torch.ops.aten.zeros_like.default, (x,), {}), new_base(
            _const_mask(x, False), (x._lazy.aval[0], torch.bool))
    s = _seed_operand()
    pv = ValueArg(ir.scalar_value(float(p), "float64"), ((), torch.float64))
    node, e = trace_node(_DROPOUT, (s, x, pv), {"train": True})
    return wrap(node, e)


def _const_mask(x, value=True):
    t = call(torch.ops.aten.full.default, (list(x.shape), value), {"dtype": torch.bool, "device": x.device})
    return t._lazy.value


@handler("randperm.generator_out", "randperm.out")
def _randperm_out(args, kwargs):
    _check_generator("randperm", kwargs, args)
    n = args[0]
    out = kwargs["out"]
    return _fill_inplace(out, _sample(_PERM, (n,), out.dtype))


def _like(kind):
    def h(args, kwargs):
        x = args[0]
        kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
        t = call(torch.ops.aten.empty_like.default, (x,), kw)
        if kind == "normal":
            return _normal_((t,), {})
        return _uniform_((t,), {})
    return h


handler("randn_like.default")(_like("normal"))
handler("rand_like.default")(_like("uniform"))


@handler("randint_like.default", "randint_like.low_dtype")
def _randint_like(args, kwargs):
    x = args[0]
    nums = [a for a in args[1:] if isinstance(a, int)]
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
    t = call(torch.ops.aten.empty_like.default, (x,), kw)
    return _random_((t, *nums), {})



def _multinomial_lowering(seed, p, *, n, replacement):
    key = _key(seed)
    pf = p.astype(jnp.float32) if p.dtype != jnp.float64 else p
    logits = jnp.where(pf > 0, jnp.log(jnp.where(pf > 0, pf, 1)), -jnp.inf)
    if replacement:
        out = jax.random.categorical(key, logits, axis=-1, shape=(n,) + logits.shape[:-1])
        out = jnp.moveaxis(out, 0, -1)
    else:
        # Gumbel top-k: n distinct categories drawn in proportion to p
        g = jax.random.gumbel(key, logits.shape, logits.dtype)
        out = jax.lax.top_k(logits + g, n)[1]
    return out.astype(jnp.int64)


def _multinomial_meta(seed, p, *, n, replacement):
    return torch.empty(tuple(p.shape[:-1]) + (n,), dtype=torch.int64, device="meta")


_MULTINOMIAL = OpInfo("multinomial", None, _multinomial_lowering, meta=_multinomial_meta)


@handler("multinomial.default")
def _multinomial(args, kwargs):
    _check_generator("multinomial", kwargs, args)
    p = args[0]
    n = args[1] if len(args) > 1 else kwargs["num_samples"]
    replacement = args[2] if len(args) > 2 else kwargs.get("replacement", False)
    if p.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not replacement and n > p.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    s = _seed_operand()
    node, e = trace_node(_MULTINOMIAL, (s, p), {"n": int(n), "replacement": bool(replacement)})
    return wrap(node, e)


def _dist_lowering(kind):
    def lowering(seed, *, shape, dtype, a=0.0, b=1.0):
        key = _key(seed)
        jd = to_jax(dtype)
        cd = jd if jnp.issubdtype(jd, jnp.floating) and jnp.finfo(jd).bits >= 32 else jnp.float32
        if kind == "cauchy":       # median a, scale b
            return (a + b * jax.random.cauchy(key, shape, cd)).astype(jd)
        if kind == "log_normal":   # exp(N(a, b))
            return jnp.exp(a + b * jax.random.normal(key, shape, cd)).astype(jd)
        if kind == "geometric":    # trials to first success, p = a
            u = jax.random.uniform(key, shape, cd, minval=jnp.finfo(cd).tiny, maxval=1.0)
            return jnp.ceil(jnp.log(u) / jnp.log1p(-a)).astype(jd)
        raise NotImplementedError(kind)
    return OpInfo(f"rng_{kind}", None, lowering, meta=_meta_shape)


_CAUCHY, _LOGNORMAL, _GEOMETRIC = (_dist_lowering(k) for k in ("cauchy", "log_normal", "geometric"))


def _arg(args, kwargs, i, name, default):
    return args[i] if len(args) > i else kwargs.get(name, default)


@handler("cauchy_.default")
def _cauchy_(args, kwargs):
    _check_generator("cauchy_", kwargs, args)
    t = args[0]
    return _fill_inplace(t, _sample(_CAUCHY, t.shape, t.dtype, a=float(_arg(args, kwargs, 1, "median", 0.0)),
                                    b=float(_arg(args, kwargs, 2, "sigma", 1.0))))


@handler("log_normal_.default")
def _log_normal_(args, kwargs):
    _check_generator("log_normal_", kwargs, args)
    t = args[0]
    return _fill_inplace(t, _sample(_LOGNORMAL, t.shape, t.dtype, a=float(_arg(args, kwargs, 1, "mean", 1.0)),
                                    b=float(_arg(args, kwargs, 2, "std", 2.0))))


@handler("geometric_.default")
def _geometric_(args, kwargs):
    _check_generator("geometric_", kwargs, args)
    t = args[0]
    p = float(_arg(args, kwargs, 1, "p", None))
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return _fill_inplace(t, _sample(_GEOMETRIC, t.shape, t.dtype, a=p))


def _poisson_lowering(seed, rate):
    key = _key(seed)
    r = rate.astype(jnp.float32) if rate.dtype != jnp.float64 else rate
    return jax.random.poisson(key, r, rate.shape).astype(rate.dtype)


def _poisson_meta(seed, rate):
    return torch.empty_like(rate)


_POISSON = OpInfo("poisson", None, _poisson_lowering, meta=_poisson_meta)


@handler("poisson.default")
def _poisson(args, kwargs):
    _check_generator("poisson", kwargs, args)
    s = _seed_operand()
    node, e = trace_node(_POISSON, (s, args[0]), {})
    return wrap(node, e)
