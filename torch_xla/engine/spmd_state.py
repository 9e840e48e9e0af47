"""Whether this process runs in SPMD mode (one logical device over all local devices)."""
import os

_enabled = os.environ.get("XLA_USE_SPMD", "0") == "1"


def enable():
    global _enabled
    _enabled = True


def enabled():
    return _enabled


def num_devices():
    import jax
    from .runtime import jax_platform
    return len(jax.local_devices(backend=jax_platform()))
