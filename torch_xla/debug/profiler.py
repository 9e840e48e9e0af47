"""torch_xla.debug.profiler (xp): traces TensorBoard's profile plugin opens.

Built on jax.profiler: traces are XSpace protos written as
<logdir>/plugins/profile/<run>/<host>.xplane.pb, with the host's Python
annotations (`Trace`, `StepTrace`, `trace_me`) and the XLA executions::

    xp.start_trace("/tmp/logs")
    for step in range(3):
        with xp.StepTrace("train_step", step_num=step):   # syncs on exit
            with xp.Trace("forward"):
                loss = model(x)
            ...
    xp.stop_trace()

    server = xp.start_server(9012)                   # then, from anywhere in this process:
    xp.trace_detached("localhost:9012", "/tmp/logs", duration_ms=2000)
"""
import functools
import os
import sys
import threading
import time

import jax.profiler as _jp

from ..engine import api as _api

_TRACER_MARKED_STEP = False
_server = {"port": None, "obj": None}
_trace_lock = threading.Lock()
_tracing = {"on": False}


def set_tracer_marked_step(value: bool):
    """Set by StepTrace: the step was synced on exit, so the loader skips its own sync."""
    global _TRACER_MARKED_STEP
    _TRACER_MARKED_STEP = value


def get_tracer_marked_step() -> bool:
    return _TRACER_MARKED_STEP


def start_server(port: int, only_on_master: bool = True):
    """Start the profiler server of this process on `port` (TensorBoard's
    "capture profile" and `trace` talk to it). Returns the server object; only
    the local master ordinal starts one unless only_on_master=False."""
    from ..core import xla_model as xm
    if only_on_master and not xm.is_master_ordinal():
        return None
    if _server["obj"] is not None:
        if _server["port"] == port:
            return _server["obj"]
        raise RuntimeError(f"a profiler server is already running on port {_server['port']}")
    try:
        obj = _jp.start_server(port)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"cannot start the profiler server on port {port}: {e}") from e
    _server["port"] = port
    _server["obj"] = obj
    return obj


def stop_server():
    if _server["obj"] is not None:
        _jp.stop_server()
        _server["obj"] = None
        _server["port"] = None


def _is_local(service_addr):
    addrs = [a.strip() for a in service_addr.replace("grpc://", "").split(",") if a.strip()]
    if len(addrs) != 1:
        return False
    host, _, port = addrs[0].rpartition(":")
    return (host in ("localhost", "127.0.0.1", "0.0.0.0", "[::1]", "::1", "")
            and _server["port"] is not None and port == str(_server["port"]))


def trace(service_addr: str, logdir: str, duration_ms: int = 1000, num_tracing_attempts: int = 3,
          host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0,
          timeout_s: int = 120, interval_s: int = 5):
    """Capture `duration_ms` of profile from the profiler server at
    `service_addr` into `logdir` (blocks until done).

    A server of this process (start_server) is captured in-process; another
    process's server needs the `xprof` package (its gRPC client)."""
    if delay_ms:
        time.sleep(delay_ms / 1000.0)
    if _is_local(service_addr):
        start_trace(logdir)
        try:
            time.sleep(duration_ms / 1000.0)
        finally:
            stop_trace()
        return
    try:
        from xprof.convert import _pywrap_profiler_plugin  # type: ignore
    except ImportError as e:
        raise RuntimeError(
            f"torch_xla.debug.profiler.trace: {service_addr} is not this process's profiler server; "
            "capturing another process needs the 'xprof' package (pip install xprof), or call "
            "start_trace/stop_trace in that process") from e
    options = {"host_tracer_level": host_tracer_level, "device_tracer_level": device_tracer_level,
               "python_tracer_level": 1, "delay_ms": delay_ms}
    last = None
    deadline = time.time() + timeout_s
    for _ in range(max(1, num_tracing_attempts)):
        try:
            _pywrap_profiler_plugin.trace(service_addr.replace("grpc://", ""), str(logdir), "", True,
                                          duration_ms, num_tracing_attempts, options)
            return
        except Exception as e:  # noqa: BLE001
            last = e
            if time.time() + interval_s > deadline:
                break
            time.sleep(interval_s)
    raise RuntimeError(f"profile capture from {service_addr} failed: {last}")


def trace_detached(service_addr: str, logdir: str, duration_ms: int = 1000, **kwargs):
    """`trace` on a background thread; returns the thread."""
    t = threading.Thread(target=trace, args=(service_addr, logdir, duration_ms), kwargs=kwargs,
                         daemon=True, name="xla-profiler-trace")
    t.start()
    return t


def start_trace(log_dir: str, create_perfetto_link: bool = False, create_perfetto_trace: bool = False):
    """Start tracing this process into `log_dir` (until stop_trace)."""
    with _trace_lock:
        if _tracing["on"]:
            raise RuntimeError("Only one profile may be run at a time: a profiler trace is already running; "
                               "call stop_trace() first")
        os.makedirs(log_dir, exist_ok=True)
        kw = {"profiler_options": _options()} if hasattr(_jp, "ProfileOptions") else {}
        _jp.start_trace(str(log_dir), create_perfetto_link=create_perfetto_link,
                        create_perfetto_trace=create_perfetto_trace, **kw)
        _tracing["on"] = True


def _options():
    """The host tracer (Trace/StepTrace/trace_me and XLA's own events) always;
    the Python function tracer only where it is safe. Before Python 3.12 it
    installs itself by swapping each thread's state in turn, and a thread
    re-entering torch's Python dispatch at that moment sees a current thread
    state that is not its own ("GIL must be held before you call
    parseIValuesToPyArgsKwargs"). XLA_PROFILER_PYTHON_TRACER=1/0 overrides."""
    from ..engine import api
    opts = _jp.ProfileOptions()
    flag = api.config.read("XLA_PROFILER_PYTHON_TRACER")   # None when unset
    on = sys.version_info >= (3, 12) if flag is None else flag
    opts.python_tracer_level = 1 if on else 0
    return opts


def stop_trace():
    """Stop the trace and write <log_dir>/plugins/profile/<run>/<host>.xplane.pb."""
    with _trace_lock:
        if not _tracing["on"]:
            raise RuntimeError("No profile started: no profiler trace is running (start_trace first)")
        try:
            from ..core import xla_model as xm
            xm.wait_device_ops()  # let the traced executions finish inside the window
        except Exception:  # noqa: BLE001
            pass
        _tracing["on"] = False
        _jp.stop_trace()


class Trace(_jp.TraceAnnotation):
    """Context manager: a named region in the profile (host side).

        with xp.Trace("forward"):
            out = model(x)
    """

    def __init__(self, name: str, **kwargs):
        self.name = name
        self.scope = None
        super().__init__(name, **kwargs)

    def __enter__(self):
        # a named scope as upstream's: a step marker inside it is an error
        self.scope = _api.push_scope(self.name)
        super().__enter__()
        return self

    def _close_scope(self):
        if self.scope is not None:
            _api.pop_scope(self.scope)
            self.scope = None

    def __exit__(self, type, value, traceback):  # noqa: A002
        self._close_scope()
        return super().__exit__(type, value, traceback)


class StepTrace(Trace):
    """A training step in the profile (TensorBoard's step view); syncs the
    device graph on exit, and the parallel loader then skips its own sync.

        with xp.StepTrace("train_step", step_num=step): ...
    """

    def __init__(self, name: str, **kwargs):
        super().__init__(name, _r=1, **kwargs)

    def __enter__(self):
        set_tracer_marked_step(True)
        return super().__enter__()

    def __exit__(self, type, value, traceback):  # noqa: A002
        from ..core import xla_model as xm
        self._close_scope()   # the step ends here, outside this trace's own scope
        try:
            if type is None:
                xm.mark_step()
        finally:
            super().__exit__(type, value, traceback)


def trace_me(scope):
    """Decorator: each call of the function is a Trace named `scope`
    (or the function's name, when used bare: @trace_me)."""
    if callable(scope):
        func = scope
        return trace_me(func.__qualname__)(func)

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with Trace(scope):
                return func(*args, **kwargs)
        return wrapper
    return decorator
