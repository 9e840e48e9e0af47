"""The PjRt launch helpers that Lightning, accelerate and older scripts call."""
import functools
from typing import Callable, Dict, Tuple


def _merge_replica_results(results) -> Dict[int, object]:
    """[(ordinal, value), ...] -> {ordinal: value}; an ordinal twice is an error."""
    merged = {}
    for ordinal, value in results:
        if ordinal in merged:
            raise AssertionError(f"torch_xla: replica ordinal {ordinal} returned twice")
        merged[ordinal] = value
    return merged


def run_multiprocess(fn: Callable, *args, start_method: str = "spawn", **kwargs) -> Dict[int, object]:
    """Run fn(*args, **kwargs) in one process per device of this host.

    Returns {global ordinal: what fn returned there}. A failing replica stops
    the others; its exception is raised here (as upstream's process pool does),
    caused by a ReplicaFailed carrying its traceback (ReplicaFailed alone when
    the exception does not pickle)."""
    from .. import _XLAC
    if _XLAC._xla_runtime_is_initialized():
        raise RuntimeError("torch_xla: the runtime is already initialized in this process; "
                           "do not use the XLA device before starting the replicas")
    from ..distributed import _launcher
    call = functools.partial(_call_without_ordinal, functools.partial(fn, *args, **kwargs))
    job = _launcher.start(call, (), start_method=start_method)
    try:
        job.join()
    except _launcher.ReplicaFailed as failed:
        exc = job.exceptions.get(getattr(failed, "rank", None))
        if isinstance(exc, BaseException):
            raise exc from failed
        raise
    return dict(sorted(job.results.items()))


def _call_without_ordinal(fn, ordinal):
    return fn()


def _run_singleprocess(fn: Callable, *args, **kwargs) -> Dict[int, object]:
    """Run fn in this process as the only replica: {0: result}."""
    return {0: fn(*args, **kwargs)}


def spawn(fn: Callable, nprocs: int = None, start_method: str = "spawn", args: Tuple = ()) -> None:
    """xmp.spawn's contract: fn(ordinal, *args) on every device (nprocs None or 1)."""
    if nprocs not in (None, 1):
        raise ValueError(f"torch_xla: unsupported nprocs ({nprocs}); use 1 or None (every device). "
                         "CPU_NUM_DEVICES / GPU_NUM_DEVICES limit the devices used.")
    from ..distributed import xla_multiprocessing as xmp
    xmp.spawn(fn, args=args, nprocs=nprocs, start_method=start_method)


def spawn_threads(fn: Callable, args: Tuple = ()) -> None:
    """fn(0, *args) in this process: one process addresses one device here."""
    fn(0, *args)


def initialize_singleprocess():
    """Nothing to set up: a lone process is the whole job."""


def initialize_multiprocess(local_rank: int, local_world_size: int):
    """Nothing to set up: the launcher gave each replica its environment."""
