"""The device random generator and random ops.

The generator state is (seed, offset), both kept on the host and fed to the
graph as scalars, so reseeding or stepping never recompiles. Each random op
takes the next offset and draws from fold_in(key(seed), offset): the same
seed gives the same values run to run, and successive draws differ.
"""
import jax
import jax.numpy as jnp
import torch

from .. import ir
from ..dtypes import to_jax
from ..tracing import OpInfo, ValueArg, trace_node, wrap
from .registry import ctx, handler


class _Rng:
    seed = 101
    offset = 0


rng = _Rng()


def manual_seed(seed):
    rng.seed = int(seed) & ((1 << 63) - 1)
    rng.offset = 0


def _next():
    rng.offset += 1
    return rng.offset


def _key(seed, offset):
    k = jax.random.PRNGKey(seed.astype(jnp.uint32) ^ (seed >> 32).astype(jnp.uint32))
    return jax.random.fold_in(k, offset.astype(jnp.uint32))


def _seed_operands():
    # forced scalar leaves: never constants, whatever the value
    return ValueArg(ir.scalar_value(rng.seed, "int64"), ((), torch.int64)), \
        ValueArg(ir.scalar_value(_next(), "int64"), ((), torch.int64))


def _meta_shape(seed, offset, *, shape, dtype, **kw):
    return torch.empty(shape, dtype=dtype, device="meta")


def _draw(kind):
    def lowering(seed, offset, *, shape, dtype, a=0.0, b=1.0):
        key = _key(seed, offset)
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
            return jax.random.permutation(key, shape[0]).astype(jd)
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
    s, o = _seed_operands()
    node, e = trace_node(info, (s, o), dict(shape=tuple(shape), dtype=dtype, **kw))
    return (node, 0)


def _fill_inplace(t, v):
    from ..views import assign
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


def _bernoulli_lowering(seed, offset, p, *, shape, dtype):
    key = _key(seed, offset)
    u = jax.random.uniform(key, shape, jnp.float32)
    return (u < p.astype(jnp.float32)).astype(to_jax(dtype))


def _bern_meta(seed, offset, p, *, shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


_BERN = OpInfo("rng_bernoulli", None, _bernoulli_lowering, meta=_bern_meta)


def _bernoulli_value(shape, dtype, p):
    s, o = _seed_operands()
    if not isinstance(p, torch.Tensor):
        p = ValueArg(ir.scalar_value(float(p), "float64"), ((), torch.float64))
    node, e = trace_node(_BERN, (s, o, p), dict(shape=tuple(shape), dtype=dtype))
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
    from ..tensor import new_base
    x = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", x)
    return new_base(_bernoulli_value(x.shape, x.dtype, p), x._aval)


def _dropout_lowering(seed, offset, x, p, *, train):
    key = _key(seed, offset)
    keep = jax.random.uniform(key, x.shape, jnp.float32) >= p.astype(jnp.float32)
    scale = (1.0 / (1.0 - p.astype(jnp.float32))).astype(x.dtype)
    return jnp.where(keep, x * scale, jnp.zeros((), x.dtype)), keep


def _dropout_meta(seed, offset, x, p, *, train):
    return torch.empty_like(x), torch.empty(x.shape, dtype=torch.bool, device="meta")


_DROPOUT = OpInfo("native_dropout", None, _dropout_lowering, meta=_dropout_meta)


@handler("native_dropout.default")
def _native_dropout(args, kwargs):
    from ..tensor import new_base
    x, p = args[0], args[1]
    train = args[2] if len(args) > 2 else kwargs.get("train", True)
    if train is False or p == 0:
        from ..dispatch import _call
        return _call(torch.ops.aten.clone.default, (x,), {}), new_base(
            _const_mask(x), (x._aval[0], torch.bool))
    if p >= 1:
        from ..dispatch import _call
        return _call(torch.ops.aten.zeros_like.default, (x,), {}), new_base(
            _const_mask(x, False), (x._aval[0], torch.bool))
    s, o = _seed_operands()
    pv = ValueArg(ir.scalar_value(float(p), "float64"), ((), torch.float64))
    node, e = trace_node(_DROPOUT, (s, o, x, pv), {"train": True})
    return wrap(node, e)


def _const_mask(x, value=True):
    from ..dispatch import _call
    t = _call(torch.ops.aten.full.default, (list(x.shape), value), {"dtype": torch.bool, "device": x.device})
    return t._v


@handler("randperm.generator_out", "randperm.out")
def _randperm_out(args, kwargs):
    _check_generator("randperm", kwargs, args)
    n = args[0]
    out = kwargs["out"]
    return _fill_inplace(out, _sample(_PERM, (n,), out.dtype))


def _like(kind):
    def h(args, kwargs):
        from ..dispatch import _call
        x = args[0]
        kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
        t = _call(torch.ops.aten.empty_like.default, (x,), kw)
        if kind == "normal":
            return _normal_((t,), {})
        return _uniform_((t,), {})
    return h


handler("randn_like.default")(_like("normal"))
handler("rand_like.default")(_like("uniform"))


@handler("randint_like.default", "randint_like.low_dtype")
def _randint_like(args, kwargs):
    from ..dispatch import _call
    x = args[0]
    nums = [a for a in args[1:] if isinstance(a, int)]
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
    t = _call(torch.ops.aten.empty_like.default, (x,), kw)
    return _random_((t, *nums), {})


del ctx
