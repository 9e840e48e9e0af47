"""torch_xla.experimental.pjrt: the PJRT preview module of torch_xla 1.13-2.0.

Older scripts (and Lightning) still import from here; every name is the runtime's
current one."""
from ..runtime import (  # noqa: F401
    addressable_device_count, device_type, global_device_count, global_ordinal, local_device_count,
    local_ordinal, local_process_count, process_count, process_index, using_pjrt, world_size,
)
from .._internal.pjrt import run_multiprocess  # noqa: F401


def rendezvous(tag, payload=b"", ordinals=None):
    """xm.rendezvous under its preview name."""
    from ..core import xla_model as xm
    return xm.rendezvous(tag, payload, list(ordinals or []))


def broadcast_master_param(model):
    """xm.broadcast_master_param under its preview name."""
    from ..core import xla_model as xm
    return xm.broadcast_master_param(model)


def spawn(fn, nprocs=None, start_method="spawn", args=()):
    """Run fn(index, *args) in one process per device (xmp.spawn)."""
    from ..distributed import xla_multiprocessing as xmp
    return xmp.spawn(fn, args=args, nprocs=nprocs, start_method=start_method)


def spawn_threads(fn, args=()):
    raise NotImplementedError(
        "torch_xla.experimental.pjrt.spawn_threads: one thread per device needs several devices "
        "in one process; this torch_xla runs one process per device (use spawn)")


def initialize_multiprocess(local_rank, local_world_size):
    raise NotImplementedError(
        "torch_xla.experimental.pjrt.initialize_multiprocess: processes join the job through "
        "torch_xla.launch / xmp.spawn / torchrun, which set this up")
