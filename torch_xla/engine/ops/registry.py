"""The lowering registry: aten overload (or whole overload packet) -> rule.

A rule takes the aten op's arguments with JAX arrays in place of tensors and
returns JAX arrays in the op's return structure. The current op's output
avals are at `ctx.entry` (see context.py) for rules that need the
PyTorch-decided dtype or shape.

`@lower(..., platform="cuda")` registers a rule for one JAX platform only; it
takes precedence over the generic rule there.
"""
import torch

from .context import ctx  # noqa: F401  (re-exported for rule modules)

aten = torch.ops.aten
LOWERINGS = {}
# handlers that replace the generic path for an op (random, data-dependent, mutating)
HANDLERS = {}
# shape functions for ops whose PyTorch meta kernel is missing or wrong
META = {}
# Scalar-typed arguments a rule needs as Python numbers (they pick the
# computation, e.g. a norm's `ord`): kept static, part of the memo key
STATIC = {}
# (op, platform) -> rule, for rules that only one platform uses
PLATFORM_LOWERINGS = {}


def _resolve(name):
    """'add.Tensor' -> aten.add.Tensor; 'add' -> the packet; None when this torch lacks it."""
    if not isinstance(name, str):
        return name
    base, _, overload = name.partition(".")
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    if not overload:
        return packet
    return getattr(packet, overload, None)


def lower(*names, static=(), platform=None):
    """Register the decorated rule for aten ops given as 'name.overload' or 'name'
    (every overload). Ops this torch does not have are skipped quietly.
    `static` names Scalar arguments the rule receives as Python numbers;
    `platform` ('cpu', 'cuda', 'tpu') limits the rule to one JAX platform."""
    def deco(fn):
        for n in names:
            op = _resolve(n)
            if op is not None:
                if platform is None:
                    LOWERINGS[op] = fn
                else:
                    PLATFORM_LOWERINGS[(op, platform)] = fn
                if static:
                    STATIC[op] = frozenset(static)
        return fn
    return deco


def static_args(func):
    s = STATIC.get(func)
    if s is None:
        s = STATIC.get(func.overloadpacket)
    return s


def handler(*names):
    """Register a dispatch-level handler (args, kwargs) -> result for aten ops."""
    def deco(fn):
        for n in names:
            op = _resolve(n)
            if op is not None:
                HANDLERS[op] = fn
        return fn
    return deco


def meta(*names):
    """Register the decorated function as the shape (meta) function of aten ops."""
    def deco(fn):
        for n in names:
            op = _resolve(n)
            if op is not None:
                META[op] = fn
        return fn
    return deco


def find(func, platform=None):
    """The rule for `func` on `platform`: a platform rule first, then the generic one."""
    if platform is not None and PLATFORM_LOWERINGS:
        fn = PLATFORM_LOWERINGS.get((func, platform))
        if fn is None:
            fn = PLATFORM_LOWERINGS.get((func.overloadpacket, platform))
        if fn is not None:
            return fn
    fn = LOWERINGS.get(func)
    if fn is None:
        fn = LOWERINGS.get(func.overloadpacket)
    return fn


def vjp_of(f, primals, grad):
    """Cotangents of f at `primals` (a tuple) for output cotangent `grad`.

    Backward ops are lowered as the vjp of the forward rule. The forward's output
    dtype is its inputs' promoted dtype (float16 input, float32 target -> float32),
    which need not be any one input's dtype, so the incoming gradient is cast to
    the dtype of f's own output, whatever the mix of input dtypes; each
    cotangent comes back in its primal's dtype."""
    import jax
    out, pull = jax.vjp(f, *primals)
    ct = jax.tree_util.tree_map(lambda o, g: g.astype(o.dtype), out, grad)
    return pull(ct)
