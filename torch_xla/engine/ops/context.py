"""The lowering context: what a rule may know beyond its arguments.

A graph is replayed under one `LoweringContext` (the platform it compiles
for, the collective mesh axis and its size in a multi-process program, a
named-scope function for HLO metadata, whether it is lowered only to be
printed: `dump`). `Graph.build_fn(ctx)` installs it
with `lowering(ctx)` while the rules run; rules read the installed values
from `ctx` (`ctx.entry` is the OpEntry being lowered: the output avals
PyTorch decided; `ctx.token` chains collectives within one graph).
"""
import contextlib
import threading


class LoweringContext:
    """Per-graph lowering state, handed to Graph.build_fn."""
    __slots__ = ("platform", "axis", "size", "scope", "dump", "mesh")

    def __init__(self, platform=None, axis=None, size=1, scope=None, dump=False, mesh=None):
        self.platform = platform  # JAX platform name ('cpu', 'cuda', 'tpu'), None: any
        self.axis = axis          # mesh axis collectives reduce over (None: no job program)
        self.size = size          # participants on that axis
        self.scope = scope        # node -> jax.named_scope name, or None
        self.dump = dump          # lowered to be printed, never run: collectives outside a
        #                           job program emit HLO collectives with explicit replica groups
        self.mesh = mesh          # an SPMD program's jax Mesh: every sharding inside is laid
        #                           over it (jax.jit takes one device order); None: as made


class _Current(threading.local):
    entry = None
    platform = None
    axis = None
    size = 1
    token = None
    scope = None
    dump = False
    mesh = None
    powers = None   # id -> array: the power results of the graph being lowered (numerics.power)


ctx = _Current()


@contextlib.contextmanager
def lowering(c):
    """Run rules under LoweringContext `c` (restores the previous one after)."""
    saved = (ctx.platform, ctx.axis, ctx.size, ctx.token, ctx.scope, ctx.dump, ctx.powers, ctx.mesh)
    ctx.platform, ctx.axis, ctx.size, ctx.token, ctx.scope = c.platform, c.axis, c.size, None, c.scope
    ctx.dump, ctx.powers, ctx.mesh = c.dump, {}, c.mesh
    try:
        yield ctx
    finally:
        (ctx.platform, ctx.axis, ctx.size, ctx.token, ctx.scope, ctx.dump, ctx.powers,
         ctx.mesh) = saved


def out_dtype(i=0):
    """The JAX dtype of output i of the op being lowered (PyTorch's meta kernel decided it)."""
    return ctx.entry.out_dtype(i)


def out_shape(i=0):
    """The shape of output i of the op being lowered."""
    return ctx.entry.out_shape(i)
