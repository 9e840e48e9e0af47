"""The SPMD compile strategy: one program over every local device.

In SPMD mode `xla:0` is one logical device over all of the process's JAX
devices. A graph's device-data inputs carry their layouts (a jax.Array with a
NamedSharding: the shards `mark_sharding` placed, or a full copy on every
device for unannotated tensors); sharding annotations of pending values are
`sharding_constraint` nodes inside the graph. The graph is jitted with those
input shardings and no output shardings, so XLA's SPMD partitioner propagates
the annotations and chooses how every output is laid out. Outputs stay
sharded on the devices; the next step feeds them back with the same layouts,
so its key (which includes each leaf's sharding) is the same and it does not
compile again.

Unsharded data is uploaded to the first device only. A graph with no sharded
input and no sharding constraint computes the same value on every device, so
it runs once, on that device (LocalJit); a graph that mixes sharded and
unsharded inputs replicates the unsharded ones (compiled as replicated, moved
into place at the call), and its outputs come back laid out by XLA.
"""
from ..runtime import topology
from .compiler import LocalJit, _compile, register_strategy


class SpmdJit(LocalJit):
    """jax.jit over the SPMD devices: inputs keep their shardings (scalar pools
    and anything on one device are replicated), outputs are left to XLA.

    jax.jit takes one device order per program, and a user's mesh may list the
    devices in any order: the program is laid over the mesh of its first
    multi-device input (else of its first sharding constraint, else the devices
    in their own order), and every other layout in it is expressed over that
    mesh (topology.on_mesh); an input laid out otherwise is moved at the call."""

    def mesh(self, graph, inputs):
        for x in inputs:
            s = getattr(x, "sharding", None)
            if s is not None and len(s.device_set) > 1:
                m = topology.mesh_of(s)
                if m is not None:
                    return m
                break
        for n in graph.order:
            if n.entry.name == "sharding_constraint":
                m = topology.mesh_of(n.entry.kwtemplate["sharding"])
                if m is not None:
                    return m
                break
        return topology.spmd_mesh()

    def in_shardings(self, inputs, mesh):
        from jax.sharding import NamedSharding, PartitionSpec
        rep = NamedSharding(mesh, PartitionSpec())
        devs = set(mesh.devices.flat)
        out = []
        for x in inputs:
            s = getattr(x, "sharding", None)
            if s is None or len(s.device_set) == 1 or s.device_set != devs:
                out.append(rep)
            else:
                out.append(topology.on_mesh(s, mesh))
        return tuple(out)

    def compile(self, graph, inputs):  # noqa: A003
        import jax
        if not _sharded(graph, inputs):
            return LocalJit.compile(self, graph, inputs)
        mesh = self.mesh(graph, inputs)
        ctx = self.context()
        if tuple(mesh.devices.flat) != tuple(topology.spmd_mesh().devices.flat):
            ctx.mesh = mesh
        fn = graph.build_fn(ctx)
        shardings = self.in_shardings(inputs, mesh)
        # an input laid out over another device order is moved at each call (_Placed)
        # (an abstract input without a layout, compiled ahead of its data, is replicated)
        args = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
                if getattr(x, "sharding", None) not in (None, s) and len(x.sharding.device_set) > 1 else x
                for x, s in zip(inputs, shardings)]
        compiled = _compile(jax.jit(fn, in_shardings=shardings, donate_argnums=graph.donated).lower(*args),
                            graph, cpu_rules=False)
        return _Placed(compiled, shardings)


# nodes that place values over the devices (lazy/handlers/sharding.py)
SHARDING_OPS = frozenset(("sharding_constraint", "spmd_full_to_shard", "spmd_shard_to_full"))


def _sharded(graph, inputs):
    """Whether any input spans several devices or any node constrains a sharding."""
    for x in inputs:
        s = getattr(x, "sharding", None)
        if s is not None and len(s.device_set) > 1:
            return True
    return any(n.entry.name in SHARDING_OPS for n in graph.order)


class _Placed:
    """Calls the executable after moving any input that is not laid out as it was
    compiled for (a host scalar pool, a tensor made on one device) into place."""
    __slots__ = ("compiled", "shardings")
    replicated = True    # one program over every device (ExecuteReplicatedTime)

    def __init__(self, compiled, shardings):
        self.compiled = compiled
        self.shardings = shardings

    def __call__(self, *inputs):
        import jax
        fixed = None
        for i, (x, s) in enumerate(zip(inputs, self.shardings)):
            xs = getattr(x, "sharding", None)
            if xs is None or xs != s:
                if fixed is None:
                    fixed = list(inputs)
                fixed[i] = topology.lay_out(x, s)
        return self.compiled(*(fixed if fixed is not None else inputs))

    def __getattr__(self, name):
        return getattr(self.compiled, name)


register_strategy(topology.SPMD, SpmdJit)
