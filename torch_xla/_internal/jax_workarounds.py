"""Upstream's JAX import helpers. Here JAX is the runtime itself, so it is
always importable and nothing needs guarding."""
import functools

__all__ = ["jax_import_guard", "requires_jax", "maybe_get_jax", "maybe_get_torchax"]


def jax_import_guard():
    """Upstream initializes its own runtime before JAX claims the TPU; here JAX is the runtime."""
    import jax  # noqa: F401


def requires_jax(fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        jax_import_guard()
        return fn(*args, **kwargs)
    return inner


def maybe_get_jax():
    import jax
    return jax


def maybe_get_torchax():
    try:
        import torchax
    except ImportError:
        return None
    return torchax
