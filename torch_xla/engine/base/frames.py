"""Where things happen in the user's code: the one frame walker of the engine.

`user_src()` is the innermost frame outside torch and torch_xla (the line an
error or a graph is attributed to); `python_frames()` lists the frames an
analysis prints, leaving the engine's own out.
"""
import os
import sys
import threading

_PKG = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../torch_xla
PKG = _PKG
ENGINE = os.path.join(_PKG, "engine") + os.sep
_internal_code = {}
_torch_dir = None


def torch_prefix():
    global _torch_dir
    if _torch_dir is None:
        import torch
        _torch_dir = os.path.dirname(torch.__file__) + os.sep
    return _torch_dir


def is_internal(code):
    """True for code of torch, torch_xla, or Python's import machinery."""
    r = _internal_code.get(code)
    if r is None:
        fn = code.co_filename
        r = (fn.startswith(_PKG + os.sep) or fn.startswith(torch_prefix())
             or fn.startswith("<frozen") or "importlib" in fn and fn.startswith("<"))
        _internal_code[code] = r
    return r


def user_frame(depth=1):
    """The innermost frame object outside torch and torch_xla, or None."""
    f = sys._getframe(depth)
    while f is not None:
        if not is_internal(f.f_code):
            return f
        f = f.f_back
    return None


def local_items(f):
    """[(name, value)] of a running frame's locals, without keeping them alive.

    Before Python 3.13, reading `f_locals` leaves a snapshot dict on the frame
    that holds every local of that moment until the frame returns or is read
    again: a loop's previous tensors (and their pending writes) stayed alive,
    joined the next barrier's graph and made it a new one. The snapshot is
    emptied after reading unless someone else holds it (`locals()` kept by the
    user, a debugger) or a Python-level trace or profile function is set (it
    writes the dict back into the frame after each event)."""
    d = f.f_locals
    items = list(d.items())
    if sys.version_info < (3, 13) and f.f_trace is None and sys.gettrace() is None \
            and sys.getprofile() is None and sys.getrefcount(d) <= 3:   # the frame, `d` and the call
        d.clear()
    return items


def user_src(depth=2):
    """(function, file, line) of the innermost frame outside torch and torch_xla."""
    f = user_frame(depth + 1)
    if f is None:
        return None
    return (f.f_code.co_name, f.f_code.co_filename, f.f_lineno)


def where():
    """'file:line in function' of the user's frame, for error messages."""
    f = user_frame(2)
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"


def python_frames(skip_engine=True):
    """Python frames, innermost first, as (function, file, line); the engine's
    internals are left out (upstream's frames start at its Python API)."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (skip_engine and fn.startswith(ENGINE)):
            out.append((f.f_code.co_name, fn, f.f_lineno))
        f = f.f_back
    return out


# ---------------------------------------------------------------------------
# named scopes (xp.Trace): per thread, numbered from 1 after every step marker

_scope_state = threading.local()


def _scopes():
    st = getattr(_scope_state, "v", None)
    if st is None:
        st = _scope_state.v = {"stack": [], "next": 1}
    return st


def current_scope():
    """The innermost open scope's full name on this thread, or None."""
    st = getattr(_scope_state, "v", None)
    return st["stack"][-1] if st is not None and st["stack"] else None


def push_scope(name):
    """Open a named scope on this thread; -> its full name (`name.<n>`)."""
    st = _scopes()
    full = f"{name}.{st['next']}"
    st["next"] += 1
    st["stack"].append(full)
    return full


def pop_scope(full):
    st = _scopes()["stack"]
    if full in st:
        del st[len(st) - 1 - st[::-1].index(full)]


def reset_scopes():
    """At a step marker: no scope may still be open (a step cannot end inside
    a traced region); numbering starts again."""
    st = _scopes()
    if st["stack"]:
        raise RuntimeError(f"Expecting scope to be empty but it is {st['stack'][-1]}")
    st["next"] = 1
