"""Which implementation of a kernel runs on which platform.

Each kernel has a table platform -> builder. A builder takes the kernel's JAX
arguments and returns the result, or None when it cannot take the call (shapes
outside its block constraints, a missing feature); the table's "default"
entry, an exact XLA reference, then runs. Tables are filled by decorating:

    @register("gmm", platform="tpu")
    def _gmm_tpu(lhs, rhs, ...): ...

    @register("gmm")                    # the default (reference) entry
    def _gmm_reference(lhs, rhs, ...): ...

and used by `call(name, platform, *args, **kwargs)`. "gpu" registers for every
GPU platform name JAX uses (cuda, rocm, gpu).
"""
import warnings
from typing import Callable, Dict, Optional

DEFAULT = "default"
GPU_PLATFORMS = ("cuda", "rocm", "gpu")

# errors meaning "this kernel is not usable here" rather than a bug in the call:
# a JAX without the kernel, a block constraint the shapes miss
_NOT_USABLE = (ImportError, AttributeError, NotImplementedError, ValueError)

_TABLES: Dict[str, Dict[str, Callable]] = {}


def _names(platform):
    return GPU_PLATFORMS if platform == "gpu" else (platform,)


def register(name: str, platform: str = DEFAULT):
    """Decorator: make `fn` kernel `name`'s builder for `platform`."""
    def deco(fn):
        table = _TABLES.setdefault(name, {})
        for p in _names(platform):
            table[p] = fn
        return fn
    return deco


def builders(name: str) -> Dict[str, Callable]:
    """Kernel `name`'s table (a copy): platform -> builder."""
    return dict(_TABLES[name])


def call(name: str, platform: Optional[str], *args, **kwargs):
    """Run kernel `name` for `platform` (None: the default entry): its
    platform builder when there is one and it takes the call, else the
    default. A builder raising one of the 'not usable' errors falls back with
    a warning naming the reason."""
    table = _TABLES[name]
    fn = table.get(platform) if platform is not None else None
    if fn is not None:
        try:
            out = fn(*args, **kwargs)
        except _NOT_USABLE as e:
            warnings.warn(f"torch_xla kernel {name}: the {platform} kernel is not used ({e}); "
                          "running the XLA reference")
            out = None
        if out is not None:
            return out
    return table[DEFAULT](*args, **kwargs)


def current_platform() -> str:
    """The platform a JAX-level kernel is being built for: the one torch_xla is
    lowering a graph for, else JAX's default backend."""
    from torch_xla.engine import api
    p = api.lowering_platform()
    if p is None:
        import jax
        p = jax.default_backend()
    return p
