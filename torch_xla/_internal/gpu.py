"""GPU host facts for one process per GPU."""


def num_local_processes() -> int:
    """GPUs this host gives the job: GPU_NUM_DEVICES, else the visible GPUs."""
    from ..engine import api
    return api.topology.local_device_count("CUDA")


def initialize_distributed_runtime(global_world_size: int) -> None:
    """Join the multi-process job now (it is otherwise joined on first device use)."""
    from ..engine import api
    api.distributed.maybe_initialize()


def shutdown_distributed_runtime() -> None:
    """Leave the multi-process job."""
    from ..engine import api
    api.distributed.shutdown()
