"""The trace mode: how an op on an XLA tensor is handled and whether a graph
may run now.

  LAZY        ops are recorded; graphs run at barriers (the default)
  EAGER       every top-level op runs at once, through a per-op executable
              (`torch_xla.experimental.eager_mode`, XLA_USE_EAGER_DEBUG_MODE)
  FULL_GRAPH  inside `torch_xla.compile(full_graph=True)`: any execution
              before the function returns is an error

`torch_xla.compile` traces lazily inside even in eager mode (a lazy region).
Eager mode and the execution guard are process-wide, as upstream's; the
lazy region and the nesting depth of dispatch are per thread.
"""
import threading

from ..base import events, frames

LAZY = "lazy"
EAGER = "eager"
FULL_GRAPH = "full_graph"

class _State(threading.local):
    lazy_region = False   # torch_xla.compile: trace lazily even in eager mode
    eager_op = False      # the executor is running one eager op's graph
    depth = 0             # nesting of __torch_dispatch__ (eager runs at depth 0)


state = _State()
_eager = [False]
_allow = [True]


def current():
    if not _allow[0]:
        return FULL_GRAPH
    if _eager[0] and not state.lazy_region:
        return EAGER
    return LAZY


def is_eager():
    return _eager[0]


def set_eager_flag(enable):
    """Record whether eager mode is on (eager.py switches the dispatcher)."""
    _eager[0] = bool(enable)


def begin_eager_op():
    state.eager_op = True


def end_eager_op():
    state.eager_op = False


def in_eager_op():
    return state.eager_op


def allow_execution():
    return _allow[0]


def set_allow_execution(allow):
    _allow[0] = bool(allow)


def enter_compile(full_graph):
    """torch_xla.compile: trace lazily inside (even in eager mode); with
    full_graph, any execution before the function returns is an error."""
    saved = (_allow[0], state.lazy_region)
    state.lazy_region = True
    if full_graph:
        _allow[0] = False
    return saved


def exit_compile(saved):
    _allow[0], state.lazy_region = saved


def unexpected_execution(graph, reason):
    """Raise for an execution inside torch_xla.compile(full_graph=True).
    Observers of `unexpected` print their analysis and may name the cause."""
    causes = events.emit("unexpected", graph=graph, reason=reason)
    where = frames.user_src(2)
    at = f" at {where[1]}:{where[2]} in {where[0]}" if where else ""
    why = f" ({causes[0]})" if causes else ""
    raise RuntimeError(
        "torch_xla.compile(full_graph=True): Unexpected execution happens inside the compiled "
        f"function, exiting{at}{why}. Something read a tensor's value (e.g. .item(), print, .cpu(), a "
        "CPU fallback op) before the function returned; move it out of the compiled function.")
