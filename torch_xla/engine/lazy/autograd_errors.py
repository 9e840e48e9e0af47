"""Errors raised while PyTorch's autograd engine runs XLA ops on its device thread.

PyTorch runs backward for a PrivateUse1 device on a C++ worker thread whose
stream guard calls back into Python while the error is still pending, which
aborts the process. So an op failing on that thread records its error and
returns placeholder outputs of the right shapes; when the backward call
returns to the user's thread, the recorded error is raised there instead.
"""
import threading

import torch
import torch.autograd.graph  # noqa: F401  (install wraps its engine entry)

_state = threading.local()
_lock = threading.Lock()
_pending = []


def on_worker_thread():
    return isinstance(threading.current_thread(), threading._DummyThread)


def _meta(a):
    if isinstance(a, torch.Tensor):
        return torch.empty(a.shape, dtype=a.dtype, device="meta") if a.device.type == "xla" else a
    if isinstance(a, (list, tuple)):
        return type(a)(_meta(x) for x in a)
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("meta")
    return a


def defer(func, args, kwargs, exc):
    """Record exc; return zero placeholders shaped like func's outputs."""
    with _lock:
        if not _pending:
            _pending.append(exc)
    try:
        out = func(*_meta(tuple(args)), **{k: _meta(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001
        return args[0] if args and isinstance(args[0], torch.Tensor) else None

    def make(o):
        if isinstance(o, torch.Tensor):
            return torch.zeros(o.shape, dtype=o.dtype, device="xla")
        if isinstance(o, (list, tuple)):
            return type(o)(make(x) for x in o)
        return o
    try:
        return make(out)
    except Exception:  # noqa: BLE001
        return None


def raise_pending():
    with _lock:
        if not _pending:
            return
        exc = _pending.pop()
        _pending.clear()
    raise exc


def install():
    """Wrap autograd's engine entry so recorded errors surface in the caller."""
    graph = torch.autograd.graph
    if getattr(graph, "_torch_xla_wrapped", False) or not hasattr(graph, "_engine_run_backward"):
        return
    original = graph._engine_run_backward

    def _engine_run_backward(*args, **kwargs):
        try:
            out = original(*args, **kwargs)
        except Exception:
            raise_pending()
            raise
        raise_pending()
        return out

    graph._engine_run_backward = _engine_run_backward
    ag = torch.autograd
    if getattr(ag, "_engine_run_backward", None) is original:
        ag._engine_run_backward = _engine_run_backward
    graph._torch_xla_wrapped = True
