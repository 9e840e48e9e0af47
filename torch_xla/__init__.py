"""PyTorch/XLA on JAX: the torch_xla user API over JAX's XLA compiler and PJRT runtime.

`torch_xla.device()` is the lazy `xla` device: ops on it are recorded into a
graph, which is compiled once by XLA (cached by hash) and run at a barrier
(`torch_xla.sync()`, `xm.mark_step()`, a host read).
"""
import contextlib
import functools

import torch

from .version import __version__
from .engine import api as _api

_api.start()

from . import _XLAC  # noqa: E402,F401
from .utils import dlpack as _dlpack  # noqa: E402

_dlpack.install()


def device(index=None):
    """The XLA device of this process (`xla:0`); `index` must be None or 0."""
    if index not in (None, 0):
        raise ValueError(
            f"torch_xla: this process owns one XLA device (xla:0); got index {index}. "
            "Use one process per device (torch_xla.launch / xmp.spawn) or SPMD.")
    return torch.device("xla", 0)


def devices():
    """The XLA devices this process can address: [xla:0]."""
    return [torch.device("xla", 0)]


def device_count():
    """How many XLA devices this process can address (1)."""
    return 1


def real_devices():
    """The runtime names of this process's devices, e.g. ['CPU:0']."""
    from . import runtime as xr
    return [f"{xr.device_type()}:{xr.global_ordinal()}"]


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    """Run fn(global_ordinal, *args) on every device: one process per device.

    Under torchrun (or any launcher that sets RANK/WORLD_SIZE) this process is
    already one replica, and fn runs here. debug_single_process runs one replica
    in this process."""
    import os
    from .distributed import xla_multiprocessing as xmp
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None or (
            os.environ.get("RANK") not in (None, "") and os.environ.get("WORLD_SIZE") not in (None, "")):
        from . import runtime as xr
        _api.distributed.maybe_initialize()
        fn(xr.global_ordinal(), *args)
        return None
    xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None, start_method=start_method)
    return None


def manual_seed(seed, device=None):
    """Seed the XLA device's random generator."""
    _api.manual_seed(seed)


def sync(wait=False, reset_scope=True):
    """Compile and run every pending op, then launch the step closures.

    With wait=True, block until the device has finished."""
    from .core import xla_model as xm
    xm.mark_step(wait=wait)


@contextlib.contextmanager
def step():
    """Context manager for one training step: syncs on exit."""
    try:
        yield
    finally:
        sync()


def compile(f=None, full_graph=False, name=None, num_different_graphs_allowed=None):  # noqa: A001
    """Trace `f` lazily and sync once when it returns, so one call is one graph.

    Works as a decorator, `torch_xla.compile(fn)`, or as a context manager,
    `with torch_xla.compile(): ...`."""
    if f is None:
        return _CompileContext(full_graph, name)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        with _CompileContext(full_graph, name):
            return f(*args, **kwargs)
    return wrapper


class _CompileContext:
    def __init__(self, full_graph, name):
        self.full_graph = full_graph
        self.name = name

    def __enter__(self):
        sync()
        self._saved = _api.enter_compile(self.full_graph)  # lazy inside; full_graph: no execution
        return self

    def __exit__(self, *exc):
        _api.exit_compile(self._saved)
        if exc[0] is None:
            sync()
        return False

    def __call__(self, f):
        return compile(f, self.full_graph, self.name)


def __getattr__(name):
    # upstream code reaches the model module as torch_xla.xm
    if name == "xm":
        from .core import xla_model
        return xla_model
    raise AttributeError(f"module 'torch_xla' has no attribute {name!r}")
