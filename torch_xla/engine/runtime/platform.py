"""The JAX platform and device this process runs on.

Nothing here starts a JAX backend at import time: a parent that only spawns
workers must never hold a device.
"""
import os
import threading

import jax

from ..base import config

# PyTorch keeps int64 and float64; JAX needs x64 for that.
jax.config.update("jax_enable_x64", True)
config.restore_jax_env()

_PLATFORMS = {"CPU": "cpu", "CUDA": "cuda", "GPU": "cuda", "TPU": "tpu"}
_lock = threading.Lock()
_device = None
_start_error = []


def device_type():
    """The PJRT device kind, upstream spelling (CPU, CUDA, TPU)."""
    kind = config.read("PJRT_DEVICE").upper()
    if kind == "GPU":
        kind = "CUDA"
    if kind not in _PLATFORMS:
        raise RuntimeError(
            f"No PjRtPlugin registered for: {kind}. Make sure the environment variable PJRT_DEVICE "
            f"is set to a correct device name. (This package runs on CPU, CUDA (or GPU) and TPU.)")
    return kind


def jax_platform():
    return _PLATFORMS[device_type()]


_configured = []


def configure_backend():
    """Before JAX starts its CPU backend: one process driving several host devices
    (SPMD, or CPU_NUM_DEVICES>1 without a multi-process job) gets that many
    (`jax_num_cpu_devices`, JAX's spelling of --xla_force_host_platform_device_count).
    Idempotent; does nothing once a backend is up."""
    if _configured:
        return
    _configured.append(True)
    if device_type() != "CPU":
        return
    from . import topology
    if topology.is_multiprocess() and not topology.spmd_enabled():
        return   # one device per process; SPMD with one process per host keeps CPU_NUM_DEVICES
    n = config.read("CPU_NUM_DEVICES")
    if n > 1:
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            pass  # a backend is already up (JAX was used directly before torch_xla)


def jax_device():
    """The one JAX device that backs `xla:0` in this process (in SPMD mode: the
    first of the devices behind the logical device)."""
    global _device
    if _device is None:
        if _start_error:
            # as upstream, a runtime that failed to start stays failed: the
            # first error is the one to fix, whatever the environment says now
            raise _start_error[0]
        with _lock:
            if _device is None:
                from . import distributed
                try:
                    platform = jax_platform()
                except RuntimeError as e:
                    _start_error.append(e)
                    raise
                with config.jax_env_during_start():
                    distributed.maybe_initialize()
                    configure_backend()
                    devs = jax.local_devices(backend=platform)
                dev = devs[local_device_index() % len(devs)]
                jax.config.update("jax_default_device", dev)
                _device = dev
    return _device


_memory_bytes = None


def device_memory_bytes():
    """How many bytes one device of this process can hold at most: the GPU's
    allocator limit, or the host's physical memory for the CPU (and where the
    platform does not say)."""
    global _memory_bytes
    if _memory_bytes is None:
        limit = None
        try:
            stats = jax_device().memory_stats() or {}
            limit = stats.get("bytes_limit")
        except Exception:  # noqa: BLE001  (platforms without memory stats)
            pass
        if not limit:
            try:
                limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (ValueError, OSError, AttributeError):
                limit = 1 << 62
        _memory_bytes = int(limit)
    return _memory_bytes


def local_device_index():
    return config.read("XLA_LOCAL_DEVICE_INDEX")


def is_initialized():
    return _device is not None
