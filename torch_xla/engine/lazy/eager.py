"""Eager mode: every top-level op on an XLA tensor runs at once, as its own
small graph (`torch_xla.experimental.eager_mode`, XLA_USE_EAGER_DEBUG_MODE).

The tensor's dispatcher gets a wrapper that, after an op called from user code
(not from inside another op's handler), runs what that op left pending. Lazy
regions (`torch_xla.compile`) trace as usual inside.
"""
import threading

from ..base import metrics
from . import executor, mode, state, tensor

_RENAME = {"CompileTime": "EagerOpCompileTime", "ExecuteTime": "EagerOpExecuteTime"}
_lock = threading.Lock()


def _eager_dispatch(inner, cls, func, types, args, kwargs):
    st = mode.state
    depth = st.depth
    st.depth = depth + 1
    try:
        out = inner(cls, func, types, args, kwargs)
    finally:
        st.depth = depth
    if depth == 0 and not st.lazy_region:
        run_op()
    return out


def set_eager(enable):
    """Eager mode on or off for this process (pending ops run when it turns on)."""
    enable = bool(enable)
    with _lock:
        if enable == mode.is_eager():
            return
        mode.set_eager_flag(enable)
        tensor.set_dispatch_wrapper("eager", _eager_dispatch if enable else None)
    if enable:
        run_op()


def run_op():
    """Run what the last top-level op left pending, as one eager op."""
    if not state.pending:
        return
    mode.begin_eager_op()
    prev = dict(metrics.rename)
    metrics.rename.update(_RENAME)
    try:
        executor.sync(None, reason="eager")
    finally:
        metrics.rename.clear()
        metrics.rename.update(prev)
        mode.end_eager_op()


def run_if_top_level():
    """A call from user code outside __torch_dispatch__ (xm.optimization_barrier_)
    runs as one eager op in eager mode."""
    if mode.current() == mode.EAGER and mode.state.depth == 0:
        run_op()
