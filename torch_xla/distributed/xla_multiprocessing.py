"""torch_xla.distributed.xla_multiprocessing (xmp): one process per device."""
from ..engine import api as _api
from ._launcher import ReplicaFailed, local_device_count, run_single, start  # noqa: F401


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """Run `fn(global_ordinal, *args)` in one process per device of this host.

    nprocs=None uses every device (CPU_NUM_DEVICES / GPU_NUM_DEVICES / the TPU
    chips); nprocs=1 runs `fn(0, *args)` in this process. The replicas join one
    job (jax.distributed, coordinator on MASTER_ADDR, loopback by default). If
    any replica fails, the others are stopped and ReplicaFailed is raised with
    its traceback. Returns None (join=False: the job, whose `processes` are the
    replicas and whose join() waits, True once all finished)."""
    if nprocs == 1 and _api.config.read("XLA_NUM_HOSTS") <= 1:
        return run_single(fn, args)
    job = start(fn, args, nprocs=nprocs, daemon=daemon, start_method=start_method)
    if not join:
        return job
    job.join()
    return None


class MpModelWrapper:
    """Upstream's wrapper to share a model between replicas; here each replica
    owns its copy, so this only holds the module."""

    def __init__(self, model):
        self._model = model

    def to(self, device):
        return self._model.to(device)


class MpSerialExecutor:
    """Runs functions one replica at a time on a host (upstream API)."""

    def __init__(self):
        import threading
        self._lock = threading.Lock()

    def run(self, fn):
        with self._lock:
            return fn()


def create_optimized_replica_groups():
    """Replica groups reordered for a TPU slice's interconnect, or None for the default
    order. Upstream reorders only for a few TPU slice types; no platform here needs it,
    so the answer is None (use ordinal order)."""
    return None
