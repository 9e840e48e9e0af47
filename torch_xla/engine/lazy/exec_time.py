"""ExecuteTime measured to the end of the run, as upstream measures it.

A launch returns as soon as the work is queued, so the time around the call is
the dispatch, not the run. Each launch is remembered with its start time and
outputs; a watcher thread notices when they are ready and records the sample.
Readiness is polled with `is_ready()`, never awaited: an awaited buffer holds a
usage reference that would make the next step's donation of it fail.

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
import threading
import time

from ..base import metrics

_pending = collections.deque()   # (open sample, t0_ns, outputs)
_lock = threading.Lock()
_wake = threading.Event()
_thread = None
_MAX_SLEEP_S = 0.002


def launched(name, t0, outs):
    """One run launched at perf_counter_ns() t0 whose results are `outs`."""
    global _thread
    sample = metrics.open_sample(name, time.perf_counter_ns() - t0)
    if not outs:
        return
    with _lock:
        _pending.append((sample, t0, tuple(outs)))
    if _thread is None:
        _thread = threading.Thread(target=_watch, name="xla-execute-time", daemon=True)
        _thread.start()
    _wake.set()


def _finished(outs):
    deleted = 0
    for a in outs:
        try:
            if a.is_ready():
                return True
        except Exception:  # donated to a later run, or deleted
            deleted += 1
    return deleted == len(outs)


def settle():
    """Complete the sample of every pending run that has finished (called before metrics are read)."""
    if not _pending:
        return
    now = time.perf_counter_ns()
    done = []
    with _lock:
        for item in list(_pending):
            if _finished(item[2]):
                _pending.remove(item)
                done.append(item)
    for sample, t0, _ in done:
        metrics.close_sample(sample, now - t0)


def _watch():
    sleep = 5e-5
    while not _stopping:
        if not _pending:
            _wake.wait()
            _wake.clear()
            sleep = 5e-5
            continue
        before = len(_pending)
        settle()
        if len(_pending) < before:
            sleep = 5e-5
        else:
            time.sleep(sleep)
            sleep = min(sleep * 2, _MAX_SLEEP_S)


_stopping = False


def _stop():
    """Join the watcher before the interpreter finalizes: a daemon thread stopped
    inside a jaxlib call at exit aborts the process ("exception not rethrown")."""
    global _stopping
    _stopping = True
    _wake.set()
    if _thread is not None:
        _thread.join(timeout=1.0)


def _after_fork():
    global _thread, _lock
    _thread = None
    _lock = threading.Lock()
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(_stop)
metrics.flushers.append(settle)
