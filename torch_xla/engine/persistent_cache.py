"""The persistent compilation cache: JAX's on-disk cache of XLA executables."""
import os

_state = {"path": None, "readonly": False}


def initialize(path, readonly=False):
    from . import executor
    from .runtime import is_initialized
    if executor._cache or is_initialized():
        raise RuntimeError(
            "torch_xla.runtime.initialize_cache must be called before any computation on the XLA device")
    import jax
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _state["path"] = path
    _state["readonly"] = readonly
