"""GPU host facts for one process per GPU."""
import os


def num_local_processes() -> int:
    """GPUs this host gives the job: GPU_NUM_DEVICES, else the visible GPUs."""
    from ..distributed._launcher import local_device_count
    saved = os.environ.get("PJRT_DEVICE")
    os.environ["PJRT_DEVICE"] = "CUDA"
    try:
        return local_device_count()
    finally:
        if saved is None:
            del os.environ["PJRT_DEVICE"]
        else:
            os.environ["PJRT_DEVICE"] = saved


def initialize_distributed_runtime(global_world_size: int) -> None:
    """Join the multi-process job now (it is otherwise joined on first device use)."""
    from ..engine import api
    api.distributed.maybe_initialize()


def shutdown_distributed_runtime() -> None:
    """Leave the multi-process job."""
    from ..engine import api
    api.distributed.shutdown()
