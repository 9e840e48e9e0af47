"""Bringing up jax.distributed for a multi-process job.

A process belongs to a job of several processes when WORLD_SIZE > 1 in its
environment (set by xmp.spawn / torch_xla.launch, or by torchrun). The first
call of `maybe_initialize()` (made by `runtime.jax_device()` before it picks the
device, and eagerly by the launchers) connects it to the job:

- the coordinator address comes from XLA_COORDINATOR_ADDRESS (our launchers),
  or, under torchrun, from a free port that rank 0 publishes through torchrun's
  own TCPStore, or else from MASTER_ADDR:MASTER_PORT;
- CPU collectives go through gloo, GPU ones through NCCL;
- each process uses one device, which joins a 1-D mesh of all processes.

A single process (WORLD_SIZE unset or 1) does nothing here.
"""
import inspect
import os
import sys
import threading

from ..base import config, events
from .topology import MESH_AXIS, is_multiprocess, rank, world_size  # noqa: F401

_lock = threading.Lock()
_state = {"done": False, "active": False}
report_hook = None  # set by the launcher: sends a fatal report to the parent


def active():
    """True once this process has joined a multi-process job."""
    return _state["active"]


def _torchrun_coordinator(master_addr):
    """Under torchrun: rank 0 picks a free port and publishes it in torchrun's store."""
    import torch.distributed as dist
    port = config.read("MASTER_PORT")   # torchrun always sets it
    key = "torch_xla/jax_coordinator/{}/{}".format(
        config.read("TORCHELASTIC_RUN_ID"), config.read("TORCHELASTIC_RESTART_COUNT"))
    store = dist.TCPStore(master_addr, port, is_master=False, timeout=_timedelta(init_timeout()))
    if rank() == 0:
        store.set(key, str(free_port(master_addr)))
    value = store.get(key).decode()
    return f"{master_addr}:{value}"


def _timedelta(seconds):
    import datetime
    return datetime.timedelta(seconds=seconds)


def free_port(host="127.0.0.1"):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError:
            s.bind(("", 0))
        return s.getsockname()[1]


def port_in_use(host, port):
    """True when something already listens on host:port (another job's coordinator)."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            return s.connect_ex((host if host not in ("", "0.0.0.0") else "127.0.0.1", int(port))) == 0
        except OSError:
            return False


def init_timeout():
    return config.read("XLA_DIST_INIT_TIMEOUT")


def coordinator_address():
    addr = config.read("XLA_COORDINATOR_ADDRESS")
    if addr:
        return addr
    master = config.read("MASTER_ADDR")
    if config.is_set("TORCHELASTIC_RUN_ID"):
        addr = _torchrun_coordinator(master)
        os.environ["XLA_COORDINATOR_ADDRESS"] = addr
        return addr
    return f"{master}:{config.read('MASTER_PORT')}"


def maybe_initialize():
    """Join the multi-process job described by the environment (once)."""
    if _state["done"]:
        return
    with _lock:
        if _state["done"]:
            return
        try:
            if is_multiprocess():
                _initialize()
        finally:
            _state["done"] = True


def _initialize():
    import jax
    from .platform import jax_platform
    platform = jax_platform()
    if platform == "cpu":
        try:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        except Exception:  # noqa: BLE001 - older JAX spells it differently
            try:
                jax.config.update("jax_cpu_enable_gloo_collectives", True)
            except Exception:  # noqa: BLE001
                pass
    try:
        jax.config.update("jax_platforms", platform)
    except Exception:  # noqa: BLE001
        pass
    kw = dict(coordinator_address=coordinator_address(), num_processes=world_size(), process_id=rank())
    params = inspect.signature(jax.distributed.initialize).parameters
    if platform in ("cuda", "rocm"):
        kw["local_device_ids"] = [config.read("LOCAL_RANK")]
    if "initialization_timeout" in params:
        kw["initialization_timeout"] = init_timeout()
    if "heartbeat_timeout_seconds" in params:
        kw["heartbeat_timeout_seconds"] = config.read("XLA_HEARTBEAT_TIMEOUT")
    if "shutdown_timeout_seconds" in params:
        kw["shutdown_timeout_seconds"] = config.read("XLA_SHUTDOWN_TIMEOUT")  # replicas may finish far apart
    jax.distributed.initialize(**kw)
    _state["active"] = True
    events.emit("job_started")  # the collective watchdog (compile/job.py) subscribes


def client():
    """The jax.distributed key-value client of this job (None when single-process)."""
    maybe_initialize()
    if not _state["active"]:
        return None
    try:
        from jax._src import distributed as _d
        return _d.global_state.client
    except Exception:  # noqa: BLE001
        return None


def shutdown():
    """Leave the job (the launchers call this when a replica's function returns)."""
    if not _state["active"]:
        return
    import jax
    try:
        jax.distributed.shutdown()
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"torch_xla: jax.distributed.shutdown failed: {e}\n")
    _state["active"] = False
