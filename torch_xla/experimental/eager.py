"""Eager mode: every op runs at once, each through a per-op executable cache.

    torch_xla.experimental.eager_mode(True)      # or XLA_USE_EAGER_DEBUG_MODE=1
    with torch_xla.experimental.eager_mode_context(True): ...

After each top-level aten op on XLA tensors, the pending IR it made is
compiled (once per op, shapes and static arguments: the executor's cache is
keyed by structure, so a one-op graph is a per-op executable) and executed.
Compile and execute times go to EagerOpCompileTime / EagerOpExecuteTime.
`torch_xla.compile(fn)` still traces fn lazily into one graph, eager or not.
"""
import contextlib

from ..engine import api as _api


def is_eager_mode():
    return _api.is_eager_mode()


def eager_mode(enable: bool):
    """Turn eager mode on or off for this process."""
    _api.set_eager_mode(enable)


@contextlib.contextmanager
def eager_mode_context(enable: bool):
    """Eager mode on (or off) inside the block, restored after."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield
    finally:
        eager_mode(saved)


@contextlib.contextmanager
def lazy_region():
    """Trace lazily inside the block even when eager mode is on (torch_xla.compile)."""
    prev = _api.lazy_region_enter()
    try:
        yield
    finally:
        _api.lazy_region_exit(prev)
