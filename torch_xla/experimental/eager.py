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
import threading

_state = {"on": False, "orig": None}
_tls = threading.local()
_lock = threading.Lock()
_RENAME = {"CompileTime": "EagerOpCompileTime", "ExecuteTime": "EagerOpExecuteTime"}


def is_eager_mode():
    return _state["on"]


def _eager_dispatch(cls, func, types, args=(), kwargs=None):
    depth = getattr(_tls, "depth", 0)
    _tls.depth = depth + 1
    try:
        out = _state["orig"](func, types, args, kwargs)
    finally:
        _tls.depth = depth
    if depth == 0 and _state["on"] and not getattr(_tls, "lazy", False):
        _run_pending()
    return out


def _run_pending():
    from ..engine import debug_analysis, executor, metrics, tensor
    if not tensor.pending:
        return
    debug_analysis._tls.eager_op = True
    prev = dict(metrics.rename)
    metrics.rename.update(_RENAME)
    try:
        executor.sync(None, reason="eager")
    finally:
        metrics.rename.clear()
        metrics.rename.update(prev)
        debug_analysis._tls.eager_op = False


def eager_mode(enable: bool):
    """Turn eager mode on or off for this process."""
    from ..engine.tensor import XLATensor
    with _lock:
        enable = bool(enable)
        if enable == _state["on"]:
            return
        if enable:
            _state["orig"] = XLATensor.__dict__["__torch_dispatch__"].__get__(None, XLATensor)
            XLATensor.__torch_dispatch__ = classmethod(_eager_dispatch)
            _state["on"] = True
            _run_pending()
        else:
            _state["on"] = False
            XLATensor.__torch_dispatch__ = classmethod(_state["orig"].__func__)


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
    prev = getattr(_tls, "lazy", False)
    _tls.lazy = True
    try:
        yield
    finally:
        _tls.lazy = prev
