"""ExecuteTime measured to the end of the run, as upstream measures it.

A launch returns as soon as the work is queued, so the time around the call is
the dispatch, not the run. Each launch is remembered with its start time and
outputs, and handed to a watcher thread that waits for the run's outputs with
`block_until_ready()`, which releases the GIL for the whole wait: the thread
costs the tracing thread nothing while a run is in flight (a polling watcher
took the GIL every few tens of microseconds, and on a 2-core host that time
came out of both the tracer and XLA's compute threads). Waiting on a buffer
does not stop a later run from taking it as a donation; a buffer already
donated or deleted is skipped.

The sample is counted at the launch (counts are exact at once, as tests and
reports read them right after a barrier) with the dispatch time as its value,
and the value becomes the run's time when the run is seen finished. Reading
the metrics first completes every run already finished, so a read right after
a host transfer sees the whole time.

A run's outputs become ready together. When every output was donated to a
later run before the watcher saw it ready, the sample is taken at that moment
(a lower bound on the run's time)."""
import atexit
import collections
import os
import queue
import threading
import time

from ..base import metrics

_pending = collections.deque()   # (open sample, t0_ns, outputs), in launch order
_lock = threading.Lock()
_queue = queue.SimpleQueue()     # wakes the watcher: one item per launch
_thread = None


def launched(name, t0, outs):
    """One run launched at perf_counter_ns() t0 whose results are `outs`."""
    global _thread
    sample = metrics.open_sample(name, time.perf_counter_ns() - t0)
    if not outs:
        return
    item = (sample, t0, tuple(outs))
    with _lock:
        _pending.append(item)
    if _thread is None:
        _thread = threading.Thread(target=_watch, name="xla-execute-time", daemon=True)
        _thread.start()
    _queue.put(item)


def _live(outs):
    """The first output not yet donated or deleted, or None. Outputs are looked at
    from the last: the first ones are the new values of tensors written in place,
    which the next step donates, and a deleted array raises (8 us a time) where
    is_deleted() is a flag read."""
    for a in reversed(outs):
        if not a.is_deleted():
            return a
    return None


def _finished(outs):
    a = _live(outs)
    try:
        return a is None or a.is_ready()
    except Exception:  # deleted since
        return True


def _close(item, now):
    """Complete `item`'s sample at `now`, unless settle() or the watcher already did."""
    with _lock:
        # by identity: deque.remove would compare the outputs' arrays with ==
        for i, x in enumerate(_pending):
            if x is item:
                del _pending[i]
                break
        else:
            return
    metrics.close_sample(item[0], now - item[1])


def settle():
    """Complete the sample of every pending run that has finished (called before metrics are read)."""
    if not _pending:
        return
    now = time.perf_counter_ns()
    with _lock:
        done = [item for item in _pending if _finished(item[2])]
    for item in done:
        _close(item, now)


def _await(outs):
    while True:
        a = _live(outs)
        if a is None:
            return
        try:
            a.block_until_ready()
            return
        except Exception:  # donated to a later run meanwhile: another; a failed run: done
            if not a.is_deleted():
                return


def _watch():
    while True:
        item = _queue.get()
        if item is None:
            return
        _await(item[2])
        _close(item, time.perf_counter_ns())


def _stop():
    """Join the watcher before the interpreter finalizes: a daemon thread stopped
    inside a jaxlib call at exit aborts the process ("exception not rethrown")."""
    if _thread is not None:
        _queue.put(None)
        _thread.join(timeout=10.0)


def _after_fork():
    global _thread, _lock, _queue
    _thread = None
    _lock = threading.Lock()
    _queue = queue.SimpleQueue()
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(_stop)
metrics.flushers.append(settle)
