"""Errors raised while PyTorch's autograd engine runs XLA ops on its device thread.

PyTorch runs backward for a PrivateUse1 device on a C++ worker thread whose
stream guard calls back into Python while the error is still pending, which
aborts the process. So an op failing on that thread records its error and
returns placeholder outputs of the right shapes; when the backward call
returns to the user's thread, the recorded error is raised there instead.
"""
import threading

import torch

_state = threading.local()
_lock = threading.Lock()
_pending = []


def on_worker_thread():
    return isinstance(threading.current_thread(), threading._DummyThread)


def defer(func, args, kwargs, exc):
    """Record exc; return zero placeholders shaped like func's outputs."""
    with _lock:
        if not _pending:
            _pending.append(exc)
    from .tracing import _meta_arg
    from . import dispatch
    try:
        margs = tuple(_meta_arg(a) for a in args)
        mkw = {k: _meta_arg(v) for k, v in kwargs.items()}
        out = func(*margs, **mkw)
    except Exception:  # noqa: BLE001
        return args[0] if args and isinstance(args[0], torch.Tensor) else None

    def make(o):
        if isinstance(o, torch.Tensor):
            return dispatch._call(torch.ops.aten.zeros.default, (list(o.shape),),
                                  {"dtype": o.dtype, "device": torch.device("xla", 0)})
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
    import torch.autograd.graph as graph
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
    import torch.autograd as ag
    if getattr(ag, "_engine_run_backward", None) is original:
        ag._engine_run_backward = _engine_run_backward
    graph._torch_xla_wrapped = True
