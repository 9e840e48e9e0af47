"""torch.distributed on XLA: the `xla` backend and the `xla://` init method.

    import torch_xla.distributed.xla_backend
    dist.init_process_group("xla", init_method="xla://")

needs no rank or world size: they come from the job (launcher or torchrun).
Collectives on XLA tensors become collective nodes of the step graph, as
xm.all_reduce & co. do; their Work objects are complete at once (the values
are lazy). barrier() is a host rendezvous.
"""
import datetime

import torch
import torch.distributed as dist

from .. import runtime as xr
from ..core import xla_model as xm

ProcessGroup = dist.ProcessGroup
Work = torch._C._distributed_c10d.Work


def _reduce_type(op):
    R = dist.ReduceOp
    if op == R.SUM:
        return xm.REDUCE_SUM, 1.0
    if op == R.AVG:
        return xm.REDUCE_SUM, 1.0 / xr.world_size()
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


class ProcessGroupXla(ProcessGroup):
    """The `xla` process group: every rank of the job, one XLA device each."""

    def __init__(self, prefix_store, rank, size, timeout):
        super().__init__(rank, size)
        self.prefix_store = prefix_store
        self._timeout = timeout
        self._barriers = 0

    def getBackendName(self):  # noqa: N802 - c10d's name
        return "xla"

    def name(self):
        return "xla"

    # -- reductions -------------------------------------------------------------
    def allreduce(self, tensors, all_reduce_options=None):
        op = all_reduce_options.reduceOp if all_reduce_options is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op)
        xm.all_reduce(rt, list(tensors), scale=scale)
        return WorkXla(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        # every rank gets the result; only the root's is specified by c10d
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op)
        xm.all_reduce(rt, list(tensors), scale=scale)
        return WorkXla(tensors)

    def reduce_scatter(self, output_tensors, input_tensors_list, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op)
        for out, inputs in zip(output_tensors, input_tensors_list):
            x = torch.cat([t.reshape(-1) for t in inputs])
            r = xm.reduce_scatter(rt, x, scale, 0, self.size())
            with torch.no_grad():
                out.copy_(r.reshape(out.shape))
        return WorkXla(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rt, scale = _reduce_type(op)
        r = xm.reduce_scatter(rt, input.reshape(-1), scale, 0, self.size())
        with torch.no_grad():
            output.copy_(r.reshape(output.shape))
        return WorkXla([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return WorkXla(outputs)

    # -- gathers ----------------------------------------------------------------
    def allgather(self, output_tensors_list, input_tensors, opts=None):
        for outs, x in zip(output_tensors_list, input_tensors):
            g = xm.all_gather(x.reshape((1,) + tuple(x.shape)), dim=0)
            with torch.no_grad():
                for j, o in enumerate(outs):
                    o.copy_(g[j])
        return WorkXla(output_tensors_list)

    def allgather_coalesced(self, output_tensors_list, input_tensors, opts=None):
        return self.allgather(output_tensors_list, input_tensors, opts)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002
        g = xm.all_gather(input.reshape(-1), dim=0)
        with torch.no_grad():
            output.copy_(g.reshape(output.shape))
        return WorkXla([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return WorkXla(outputs)

    # -- broadcast / all-to-all -------------------------------------------------
    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        xm.collective_broadcast(list(tensors), root_ordinal=root)
        return WorkXla(tensors)

    def alltoall(self, output_tensor_list, input_tensor_list, opts=None):
        n = self.size()
        shapes = {tuple(t.shape) for t in input_tensor_list}
        if len(shapes) != 1:
            raise NotImplementedError("torch_xla: alltoall needs inputs of one shape")
        x = torch.stack(list(input_tensor_list))
        y = xm.all_to_all(x, 0, 0, n)
        with torch.no_grad():
            for j, o in enumerate(output_tensor_list):
                o.copy_(y[j])
        return WorkXla(output_tensor_list)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes or [0])) > 1 or len(set(input_split_sizes or [0])) > 1:
                raise NotImplementedError("torch_xla: alltoall with uneven splits is not supported")
        y = xm.all_to_all(input, 0, 0, self.size())
        with torch.no_grad():
            output.copy_(y)
        return WorkXla([output])

    # -- host-side --------------------------------------------------------------
    def barrier(self, opts=None):
        self._barriers += 1
        xm.rendezvous(f"torch_xla.xla_backend.barrier.{self._barriers}")
        return WorkXla([])

    def send(self, tensors, dst_rank, tag=0):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def recv(self, tensors, src_rank, tag=0):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("torch_xla: point-to-point send/recv is not supported by the xla backend")

    def gather(self, output_tensors, input_tensors, opts=None):
        raise NotImplementedError("torch_xla: gather is not supported by the xla backend; use all_gather")

    def scatter(self, output_tensors, input_tensors, opts=None):
        raise NotImplementedError("torch_xla: scatter is not supported by the xla backend")


def _create_xla_process_group(prefix_store, rank, size, timeout):
    if size != xr.world_size() or rank != xr.global_ordinal():
        raise ValueError(f"torch_xla: the xla backend spans the whole job (rank {xr.global_ordinal()} of "
                         f"{xr.world_size()}); got rank {rank} of {size}")
    return ProcessGroupXla(prefix_store, rank, size, timeout)


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
        dist.Backend.register_backend("xla", _create_xla_process_group, devices=["xla"])
    except TypeError:  # older torch: no devices argument
        dist.Backend.register_backend("xla", _create_xla_process_group)
    except (RuntimeError, ValueError):
        pass  # already registered
    try:
        dist.register_rendezvous_handler("xla", _xla_rendezvous_handler)
    except (RuntimeError, ValueError):
        pass


_register()


def new_xla_process_group(ranks=None, timeout=None, backend=None, pg_options=None):
    """torch.distributed.new_group for the `xla` backend. Only the whole world is
    supported (ranks None or every rank): the `xla` process group has no sub-groups."""
    import torch.distributed as dist
    if isinstance(ranks, range):
        ranks = list(ranks)
    if isinstance(pg_options, dict) and "xla_pg_options" in pg_options:
        raise NotImplementedError("new_xla_process_group: SPMD process groups (xla_pg_options) are not "
                                  "supported by this torch_xla")
    if ranks is not None and sorted(ranks) != list(range(dist.get_world_size())):
        raise NotImplementedError(
            f"new_xla_process_group(ranks={ranks}): the xla process group has no sub-groups in this "
            "torch_xla; use the world group, or xm collectives with groups=")
    kwargs = {} if timeout is None else {"timeout": timeout}
    return dist.new_group(ranks=ranks, backend=backend, pg_options=pg_options, **kwargs)
