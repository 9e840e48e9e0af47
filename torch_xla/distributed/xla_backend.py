"""torch.distributed on XLA: the `xla` backend and the `xla://` init method.

    import torch_xla.distributed.xla_backend
    dist.init_process_group("xla", init_method="xla://")

needs no rank or world size: they come from the job (launcher or torchrun).
Collectives on XLA tensors become collective nodes of the step graph, as
xm.all_reduce & co. do; their Work objects are complete at once (the values
are lazy). barrier() is a host rendezvous.

Sub-groups. Every process runs the step's collectives, so a group's
collectives run over replica groups that split the whole world: `_mesh`, a
list of rank lists (upstream's name). dist.new_group(ranks) gives

- every rank: one group; one rank: every rank alone;
- with pg_options={'xla_pg_options': {'spmd': True}}: the row or column of
  a rectangular mesh that `ranks` is (horizontal: consecutive ranks starting
  at a multiple of their count; vertical: ranks `world / count` apart,
  starting in the first row), ValueError for any other set;
- with {'xla_pg_options': {'mesh': [[...], ...]}}: that mesh;
- other rank sets: [ranks], whose collectives are refused (they would span
  only part of the job).
"""
import datetime

import torch
import torch.distributed as dist

from .. import runtime as xr
from ..core import xla_model as xm
from ..engine import api as _api
from .collectives import _always, _assign, _check_xla

ProcessGroup = dist.ProcessGroup
Work = torch._C._distributed_c10d.Work
_c = _api.collective_ops


def _reduce_type(op, group_size):
    """c10d ReduceOp -> (reduce type, scale)."""
    R = dist.ReduceOp
    if op == R.SUM:
        return xm.REDUCE_SUM, 1.0
    if op == R.AVG:
        return xm.REDUCE_SUM, 1.0 / group_size
    if op == R.PRODUCT:
        return xm.REDUCE_MUL, 1.0
    if op == R.MIN:
        return xm.REDUCE_MIN, 1.0
    if op == R.MAX:
        return xm.REDUCE_MAX, 1.0
    if op == R.BAND:
        return xm.REDUCE_AND, 1.0
    if op == R.BOR:
        return xm.REDUCE_OR, 1.0
    raise NotImplementedError(f"torch_xla: reduce op {op} is not supported by the xla backend")


class WorkXla(Work):
    """A finished collective: its results are (lazy) XLA tensors."""

    def __init__(self, tensors):
        super().__init__()
        self._tensors = tensors

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._tensors

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._tensors)
        return fut


# ---------------------------------------------------------------------------
# collectives over replica groups (None: every process of the job)

def _alone(groups):
    """One process and no replica groups: each collective is this process alone
    (as xm's collectives with one process, unless XLA_ALWAYS_ALLREDUCE=1)."""
    return groups is None and xr.world_size() == 1 and not _always()


def _all_reduce(tensors, reduce_type, scale, groups, what):
    """In place."""
    tensors = list(tensors)
    for t in tensors:
        _check_xla(t, what)
    if not tensors or _alone(groups):
        return
    outs = _api.trace_collective(_c.ALL_REDUCE, (tensors,),
                                 {"reduce_type": reduce_type, "scale": float(scale), "groups": groups})
    for t, o in zip(tensors, outs):
        _assign(t, o)


def _all_gather(tensors, groups, count, what):
    """Each tensor gathered along dim 0 from the `count` members of its group."""
    tensors = list(tensors)
    for t in tensors:
        _check_xla(t, what)
    if _alone(groups):
        return [t.clone() for t in tensors]
    if len(tensors) == 1:
        return [_api.trace_collective(_c.ALL_GATHER, (tensors[0],),
                                      {"dim": 0, "groups": groups, "count": count})]
    return list(_api.trace_collective(_c.ALL_GATHER_COALESCED, (tensors,),
                                      {"dim": 0, "groups": groups, "count": count}))


def _reduce_scatter(x, reduce_type, scale, groups, count, what):
    """x (1-D) reduced over the group; this member's 1/count of it."""
    _check_xla(x, what)
    if x.shape[0] % count:
        raise ValueError(f"torch_xla: {what}: {x.shape[0]} elements do not split into {count} shards")
    if _alone(groups):
        return x * scale if scale != 1.0 else x.clone()
    return _api.trace_collective(_c.REDUCE_SCATTER, (x,), {
        "reduce_type": reduce_type, "scale": float(scale), "dim": 0, "shard_count": int(count),
        "groups": groups})


def _all_to_all(x, groups, count, what):
    """x's dim 0 split into `count` pieces, piece j to member j; received pieces along dim 0."""
    _check_xla(x, what)
    if x.shape[0] % count:
        raise ValueError(f"torch_xla: {what}: dimension 0 of size {x.shape[0]} does not split into {count}")
    if _alone(groups):
        return x.clone()
    return _api.trace_collective(_c.ALL_TO_ALL, (x,), {
        "split_dim": 0, "concat_dim": 0, "split_count": int(count), "groups": groups})


def _broadcast(tensors, root, groups, what):
    """In place: every member takes the values of global rank `root`."""
    tensors = list(tensors)
    for t in tensors:
        _check_xla(t, what)
    if not tensors or _alone(groups):
        return
    outs = _api.trace_collective(_c.COLLECTIVE_BROADCAST, (tensors,), {"root": int(root), "groups": groups})
    for t, o in zip(tensors, outs):
        _assign(t, o)


def _copy_chunks(outputs, result, chunk):
    """Copy result's dim-0 chunks of `chunk` rows into outputs (reshaped to each)."""
    with torch.no_grad():
        for o, piece in zip(outputs, torch.split(result, chunk)):
            o.copy_(piece.reshape(o.shape))


class ProcessGroupXla(ProcessGroup):
    """The `xla` process group: the job's ranks, one XLA device each, or a
    sub-group of them whose collectives run over the replica groups `_mesh`."""

    def __init__(self, prefix_store, rank, size, timeout, mesh=None, ranks=None, world=None):
        super().__init__(rank, size)
        self.prefix_store = prefix_store
        self.timeout = timeout
        self._mesh = [list(g) for g in mesh] if mesh else []
        self._ranks = list(ranks) if ranks is not None else None   # global ranks, by group rank
        self._world = world if world is not None else size
        self._barriers = 0

    def getBackendName(self):  # noqa: N802 - c10d's name
        return "xla"

    def name(self):
        return "xla"

    # -- replica groups ---------------------------------------------------------
    def _replica_groups(self):
        """-> (groups, n): groups None (every process of the job) or a tuple of
        equal-size tuples splitting the world's ranks; n the ranks in each."""
        mesh = self._mesh
        if not mesh or (len(mesh) == 1 and sorted(mesh[0]) == list(range(self._world))):
            return None, xr.world_size()
        groups = tuple(tuple(int(r) for r in g) for g in mesh)
        size = len(groups[0])
        if any(len(g) != size for g in groups) or sorted(r for g in groups for r in g) != list(range(self._world)):
            raise NotImplementedError(
                f"torch_xla: the xla process group with replica groups {mesh} does not split the "
                f"{self._world} ranks into groups of one size: every process of the job runs the step's "
                "collectives, so a sub-group's collectives need every rank in a group like it; create it "
                "with pg_options={'xla_pg_options': {'spmd': True}} (a row or column of a rectangular "
                "mesh) or {'xla_pg_options': {'mesh': [[...], ...]}}")
        return groups, size

    def _global_rank(self, group_rank):
        return self._ranks[group_rank] if self._ranks is not None else group_rank

    # -- reductions -------------------------------------------------------------
    def allreduce(self, tensors, all_reduce_options=None):
        groups, n = self._replica_groups()
        op = all_reduce_options.reduceOp if all_reduce_options is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op, n)
        _all_reduce(tensors, rt, scale, groups, "dist.all_reduce")
        return WorkXla(tensors)

    def allreduce_coalesced(self, *args, **kwargs):
        raise NotImplementedError(
            "torch_xla: the xla backend has no allreduce_coalesced (nor has upstream's): all-reduce each "
            "tensor, or pass them together to xm.all_reduce; the step graph holds them all anyway")

    def reduce(self, tensors, opts=None):
        # every rank gets the result; only the root's is specified by c10d
        groups, n = self._replica_groups()
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op, n)
        _all_reduce(tensors, rt, scale, groups, "dist.reduce")
        return WorkXla(tensors)

    def _reduce_scatter_into(self, output, flat, opts, what):
        groups, n = self._replica_groups()
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op, n)
        r = _reduce_scatter(flat, rt, scale, groups, n, what)
        if r.numel() != output.numel():
            raise ValueError(f"torch_xla: {what}: output has {output.numel()} elements, this rank's shard "
                             f"{r.numel()}")
        with torch.no_grad():
            output.copy_(r.reshape(output.shape))

    def reduce_scatter(self, output_tensors, input_tensors_list, opts=None):
        for out, inputs in zip(output_tensors, input_tensors_list):
            shapes = {tuple(t.shape) for t in inputs}
            if len(shapes) > 1:
                raise ValueError(f"torch_xla: dist.reduce_scatter needs inputs of one shape, got {sorted(shapes)}")
            x = torch.cat([t.reshape(-1) for t in inputs])
            self._reduce_scatter_into(out, x, opts, "dist.reduce_scatter")
        return WorkXla(output_tensors)

    def reduce_scatter_coalesced(self, output_tensors, input_tensors_list, opts=None):
        return self.reduce_scatter(output_tensors, input_tensors_list, opts)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        self._reduce_scatter_into(output, input.reshape(-1), opts, "dist.reduce_scatter_tensor")
        return WorkXla([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return WorkXla(outputs)

    # -- gathers ----------------------------------------------------------------
    # Each member's input lands in the outputs in group-rank order. The gather
    # spans the job's processes (or the group's members), which is the group's
    # size unless dist's world is not the job's (a test that patches it): then
    # the outputs the gather does not reach keep their values, as upstream.
    def allgather(self, output_tensors_list, input_tensors, opts=None):
        groups, n = self._replica_groups()
        for outs, x in zip(output_tensors_list, input_tensors):
            flat = x.reshape(-1) if x.dim() == 0 else x
            g, = _all_gather([flat], groups, n, "dist.all_gather")
            _copy_chunks(outs, g, flat.shape[0])
        return WorkXla(output_tensors_list)

    def allgather_coalesced(self, output_tensors_list, input_tensors, opts=None):
        groups, n = self._replica_groups()
        flats = [x.reshape(-1) if x.dim() == 0 else x for x in input_tensors]
        gathered = _all_gather(flats, groups, n, "dist.all_gather_coalesced")
        for outs, x, g in zip(output_tensors_list, flats, gathered):
            _copy_chunks(outs, g, x.shape[0])
        return WorkXla(output_tensors_list)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002
        groups, n = self._replica_groups()
        g, = _all_gather([input.reshape(-1)], groups, n, "dist.all_gather_into_tensor")
        if g.numel() != output.numel():
            raise ValueError(f"torch_xla: dist.all_gather_into_tensor: output has {output.numel()} elements, "
                             f"the {n} inputs {g.numel()}")
        with torch.no_grad():
            output.copy_(g.reshape(output.shape))
        return WorkXla([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return WorkXla(outputs)

    # -- broadcast / all-to-all -------------------------------------------------
    def broadcast(self, tensors, opts=None):
        groups, _ = self._replica_groups()
        root = opts.rootRank if opts is not None else 0   # a rank of this group
        tensors = list(tensors)
        if opts is not None and len(tensors) > 1:
            tensors = [tensors[opts.rootTensor]]
        _broadcast(tensors, self._global_rank(root), groups, "dist.broadcast")
        return WorkXla(tensors)

    def alltoall(self, output_tensor_list, input_tensor_list, opts=None):
        groups, n = self._replica_groups()
        shapes = {tuple(t.shape) for t in input_tensor_list}
        if len(shapes) != 1:
            raise NotImplementedError("torch_xla: alltoall needs inputs of one shape")
        if len(input_tensor_list) != n:
            raise ValueError(f"torch_xla: dist.all_to_all: {len(input_tensor_list)} inputs for a group of {n}")
        x = torch.stack(list(input_tensor_list))
        y = _all_to_all(x, groups, n, "dist.all_to_all")
        with torch.no_grad():
            for j, o in enumerate(output_tensor_list):
                o.copy_(y[j])
        return WorkXla(output_tensor_list)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes or [0])) > 1 or len(set(input_split_sizes or [0])) > 1:
                raise NotImplementedError("torch_xla: alltoall with uneven splits is not supported")
        groups, n = self._replica_groups()
        y = _all_to_all(input, groups, n, "dist.all_to_all_single")
        with torch.no_grad():
            output.copy_(y)
        return WorkXla([output])

    # -- host-side --------------------------------------------------------------
    def barrier(self, opts=None):
        self._barriers += 1
        if self._ranks is None or len(self._ranks) == self._world:
            xm.rendezvous(f"torch_xla.xla_backend.barrier.{self._barriers}")
        elif self.size() > 1:   # only the members arrive: meet in the group's store
            store = self.prefix_store
            if store is None:
                raise NotImplementedError("torch_xla: barrier of a sub-group made without a store")
            key = f"torch_xla.barrier.{self._barriers}"
            if store.add(key, 1) == self.size():
                store.set(key + ".done", b"1")
            store.wait([key + ".done"])
        return WorkXla([])

    def monitored_barrier(self, *args, **kwargs):
        raise NotImplementedError(
            "torch_xla: the xla backend has no monitored_barrier (nor has upstream's): its barrier is a "
            "rendezvous that cannot name the ranks that did not arrive; use dist.barrier()")

    def send(self, tensors, dst_rank, tag=0):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def recv(self, tensors, src_rank, tag=0):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def recv_anysource(self, *args, **kwargs):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def gather(self, output_tensors, input_tensors, opts=None):
        raise NotImplementedError("torch_xla: gather is not supported by the xla backend; use all_gather")

    def scatter(self, output_tensors, input_tensors, opts=None):
        raise NotImplementedError("torch_xla: scatter is not supported by the xla backend")


# ---------------------------------------------------------------------------
# sub-group meshes

def _infer_mesh(ranks, world):
    """The rectangular mesh of `world` ranks of which `ranks` (sorted) is a row
    (consecutive ranks) or a column (ranks `world / len(ranks)` apart)."""
    n = len(ranks)
    if world % n:
        raise ValueError(f"torch_xla: new_group(ranks={ranks}): {n} ranks are not a side of a rectangular mesh "
                         f"of the {world} ranks")
    step = ranks[1] - ranks[0]
    if ranks != list(range(ranks[0], ranks[0] + step * n, step)):
        raise ValueError(f"torch_xla: new_group(ranks={ranks}): the ranks are not evenly spaced")
    rows = world // n
    if step == 1:   # a row
        if ranks[0] % n:
            raise ValueError(f"torch_xla: new_group(ranks={ranks}): a row of {n} ranks starts at a multiple "
                             f"of {n}")
        return [list(range(i * n, (i + 1) * n)) for i in range(rows)]
    if step != rows or ranks[0] >= rows:   # a column
        raise ValueError(f"torch_xla: new_group(ranks={ranks}): a column of {n} of the {world} ranks has ranks "
                         f"{rows} apart, starting below {rows}")
    return [list(range(i, world, rows)) for i in range(rows)]


def _check_mesh(mesh, ranks, world):
    groups = [sorted(int(r) for r in g) for g in mesh]
    size = len(groups[0]) if groups else 0
    if (not groups or any(len(g) != size for g in groups)
            or sorted(r for g in groups for r in g) != list(range(world)) or sorted(ranks) not in groups):
        raise ValueError(f"torch_xla: new_group(ranks={ranks}): xla_pg_options mesh={mesh} must split the "
                         f"{world} ranks into groups of one size, one of them the group's ranks")
    return [list(g) for g in mesh]


def _mesh_for(ranks, world, pg_options):
    xla_options = pg_options.get("xla_pg_options") if isinstance(pg_options, dict) else None
    xla_options = xla_options or {}
    if ranks == list(range(world)):
        return [ranks]
    if len(ranks) == 1:
        return [[r] for r in range(world)]
    if xla_options.get("mesh") is not None:
        return _check_mesh(xla_options["mesh"], ranks, world)
    if xla_options.get("spmd", False):
        return _infer_mesh(ranks, world)
    return [ranks]


def _create_xla_process_group(*args, **kwargs):
    """c10d's creator, called with its extended arguments (DistributedBackendOptions,
    pg_options) by init_process_group / new_group, or as (prefix_store, rank, size,
    timeout) by code that makes a process group itself."""
    # as upstream: an SPMD program is one process over every device, with nothing to exchange
    assert not xr.is_spmd(), "XLA backend is not supported with SPMD. Please use a CPU process group instead."
    opts_type = torch._C._distributed_c10d._DistributedBackendOptions
    if len(args) == 2 and not kwargs and isinstance(args[0], opts_type):
        opts, pg_options = args
        ranks = list(opts.global_ranks_in_group)
        if not ranks:   # the default group
            return _world_group(opts.store, opts.group_rank, opts.group_size, opts.timeout)
        world = dist.group.WORLD.size()
        mesh = _mesh_for(ranks, world, pg_options)
        return ProcessGroupXla(opts.store, opts.group_rank, opts.group_size, opts.timeout, mesh=mesh,
                               ranks=ranks, world=world)
    return ProcessGroupXla(*args, **kwargs)


def _world_group(store, rank, size, timeout):
    if size != xr.world_size() or rank != xr.global_ordinal():
        raise ValueError(f"torch_xla: the xla backend's world is the job (rank {xr.global_ordinal()} of "
                         f"{xr.world_size()}); got rank {rank} of {size}")
    return ProcessGroupXla(store, rank, size, timeout)


def _xla_rendezvous_handler(url, timeout=datetime.timedelta(minutes=30), **kwargs):
    """xla://: rank and world size from the job; a TCPStore whose port rank 0 publishes."""
    from ..engine.api import distributed as distributed_init
    from . import host_exchange
    distributed_init.maybe_initialize()
    rank, world = xr.global_ordinal(), xr.world_size()
    master = xr.get_master_ip()
    if world == 1:
        store = dist.HashStore()
    elif rank == 0:
        store = dist.TCPStore(master, 0, world, True, timeout=timeout, wait_for_workers=False)
        host_exchange.rendezvous("torch_xla.xla_backend.store", str(store.port))
    else:
        ports = host_exchange.rendezvous("torch_xla.xla_backend.store", b"")
        store = dist.TCPStore(master, int(ports[0].decode()), world, False, timeout=timeout)
    yield (store, rank, world)
    raise RuntimeError("torch_xla: the xla:// rendezvous cannot restart")


def _register():
    try:
        dist.Backend.register_backend("xla", _create_xla_process_group, extended_api=True, devices=["xla"])
    except (RuntimeError, ValueError):
        pass  # already registered
    try:
        dist.register_rendezvous_handler("xla", _xla_rendezvous_handler)
    except (RuntimeError, ValueError):
        pass


_register()


def new_xla_process_group(ranks=None, timeout=None, backend=None, pg_options=None):
    """torch.distributed.new_group for the `xla` backend (upstream's name): the
    group's replica groups follow `ranks` and pg_options' 'xla_pg_options'
    (see the module's docstring)."""
    if isinstance(ranks, range):
        ranks = list(ranks)
    kwargs = {} if timeout is None else {"timeout": timeout}
    return dist.new_group(ranks=ranks, backend=backend, pg_options=pg_options, **kwargs)
