"""The persistent compilation cache: XLA executables kept on disk across processes.

`xr.initialize_cache(path, readonly=False)` (or XLA_PERSISTENT_CACHE_PATH,
with XLA_PERSISTENT_CACHE_READ_ONLY=1) turns on JAX's on-disk compilation
cache at `path`, with no size or compile-time threshold, so a later process
that builds the same graph loads the executable instead of running XLA.
Read-only mode loads entries but never writes (a cache shared by many jobs).

Hits and misses are counted (PersistentCacheHit / PersistentCacheMiss) from
JAX's monitoring events around each compilation the executor makes.
"""
import hashlib
import os
import threading

from ..base import config
from ..runtime import topology

_state = {"path": None, "readonly": False}
_events = {"requests": 0, "hits": 0}
_lock = threading.Lock()
_listening = False
_patched = False

_REQUEST = "/jax/compilation_cache/compile_requests_use_cache"
_HIT = "/jax/compilation_cache/cache_hits"


def _on_event(event, **kwargs):
    if event == _HIT:
        _events["hits"] += 1
    elif event == _REQUEST:
        _events["requests"] += 1


def _listen():
    global _listening
    if _listening:
        return
    import jax.monitoring
    jax.monitoring.register_event_listener(_on_event)
    _listening = True


def _patch_readonly():
    """Make JAX skip cache writes while our cache is read-only."""
    global _patched
    if _patched:
        return
    try:
        from jax._src import compilation_cache as cc
    except ImportError:  # pragma: no cover - JAX moved its internals
        return
    orig = getattr(cc, "put_executable_and_time", None)
    if orig is None:  # pragma: no cover
        return

    def put_executable_and_time(*args, **kwargs):
        if _state["readonly"]:
            return None
        return orig(*args, **kwargs)

    cc.put_executable_and_time = put_executable_and_time
    _patched = True


def initialize(path, readonly=False):
    from . import cache
    from ..runtime.platform import is_initialized
    if cache.size() or is_initialized():
        raise RuntimeError(
            "torch_xla.runtime.initialize_cache must be called before any computation on the XLA device "
            "(a tensor was already moved to or computed on the device in this process); "
            "call it at the start of the program, or set XLA_PERSISTENT_CACHE_PATH")
    if _state["path"] is not None and os.path.abspath(path) != os.path.abspath(_state["path"]):
        raise RuntimeError(f"the persistent cache is already initialized at {_state['path']}")
    import jax
    path = os.fspath(path)
    if readonly:
        if not os.path.isdir(path):
            raise RuntimeError(f"initialize_cache(readonly=True): {path} is not a directory")
    else:
        os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        # the cache may have been set up (empty) by an earlier compilation elsewhere
        from jax._src import compilation_cache as cc
        cc.reset_cache()
    except Exception:  # noqa: BLE001
        pass
    _state["path"] = path
    _state["readonly"] = bool(readonly)
    _listen()
    _patch_readonly()


def from_env():
    """Honour XLA_PERSISTENT_CACHE_PATH (and XLA_PERSISTENT_CACHE_READ_ONLY) at import."""
    path = config.read("XLA_PERSISTENT_CACHE_PATH")
    if path and _state["path"] is None:
        ro = config.read("XLA_PERSISTENT_CACHE_READ_ONLY")
        initialize(path, readonly=ro)


def enabled():
    return _state["path"] is not None


def snapshot():
    """Event counts before a compilation (None when the cache is off)."""
    if _state["path"] is None:
        return None
    return _events["requests"], _events["hits"]


def account(before):
    """After a compilation: count PersistentCacheHit or PersistentCacheMiss.
    -> True on a hit, False on a miss, None when the cache was not consulted."""
    if before is None:
        return None
    from ..base import metrics
    req, hits = _events["requests"], _events["hits"]
    if hits > before[1]:
        metrics.counter("PersistentCacheHit")
        return True
    if req > before[0]:
        metrics.counter("PersistentCacheMiss")
        return False
    return None


# ---------------------------------------------------------------------------
# torch_xla's own layer: executables keyed by a stable digest of the IR graph,
# so a hit skips JAX's tracing and lowering as well as XLA's compilation.

_env_digest = []


def _environment():
    if not _env_digest:
        import jax
        import jaxlib
        from ..runtime.platform import jax_device
        h = hashlib.sha256()
        dev = jax_device()
        parts = [jax.__version__, getattr(jaxlib, "__version__", ""),
                 dev.platform, getattr(dev, "device_kind", ""), str(jax.config.jax_enable_x64)]
        for k in ("XLA_FLAGS", "XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16", "XLA_NO_SPECIAL_SCALARS",
                  "PJRT_DEVICE", "XLA_HLO_DEBUG", "XLA_IR_DEBUG"):
            parts.append(f"{k}={config.raw(k) or ''}")
        # the lowering code itself: any edit to the engine invalidates old entries
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for dirpath, _dirs, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        digest = hashlib.sha256(fh.read()).hexdigest()
                    parts.append(f"{os.path.relpath(os.path.join(dirpath, f), root)}:{digest}")
        h.update("\n".join(parts).encode())
        _env_digest.append(h.digest())
    return _env_digest[0]


def _usable():
    # multi-process and SPMD programs go through JAX's own cache
    return _state["path"] is not None and topology.mode() == topology.SINGLE


def _entry_path(digest):
    return os.path.join(_state["path"], f"torch_xla-{digest}.exe")


def load(graph, inputs):
    """-> (compiled or None, digest or None); the digest is None when the
    graph does not go through this cache."""
    if not _usable():
        return None, None
    try:
        digest = graph.digest(_environment(), inputs)
    except Exception:  # noqa: BLE001
        return None, None
    if digest is None:
        return None, None
    path = _entry_path(digest)
    if not os.path.exists(path):
        return None, digest
    try:
        import pickle
        from jax.experimental import serialize_executable
        with open(path, "rb") as f:
            payload, in_tree, out_tree = pickle.load(f)
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree), digest
    except Exception:  # noqa: BLE001 - a stale or foreign entry is a miss
        return None, digest


def store(digest, compiled):
    if digest is None or _state["readonly"] or _state["path"] is None:
        return
    _save_checks()
    try:
        import pickle
        import tempfile
        from jax.experimental import serialize_executable
        blob = pickle.dumps(serialize_executable.serialize(compiled))
        fd, tmp = tempfile.mkstemp(dir=_state["path"], prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, _entry_path(digest))
    except Exception:  # noqa: BLE001 - caching is best effort
        pass


# ---------------------------------------------------------------------------
# Lowering checks already passed. Each new (op, arguments) signature is checked
# once per process by tracing its rule abstractly (tracing._check_entry, a few
# ms of JAX tracing each); a process that then loads every executable from this
# cache spent most of its first step on them. An earlier process's outcomes
# (passed, with these dtype fix-ups) are kept beside the executables, under the
# same digest of the engine's source and versions, so a later one skips them.

_checks = {"known": None, "new": {}}


def _checks_path():
    return os.path.join(_state["path"], f"torch_xla-checks-{_environment().hex()[:32]}.pkl")


def _read_checks():
    import pickle
    try:
        with open(_checks_path(), "rb") as f:
            known = pickle.load(f)
        return known if isinstance(known, dict) else {}
    except Exception:  # noqa: BLE001 - missing, stale or torn: check again
        return {}


def _keeps(key_repr):
    # a key that names an object by address means nothing to another process
    return _usable() and " at 0x" not in key_repr


def checked(name, key_repr):
    """-> (True, cast) when an earlier process with this engine checked the
    signature (cast: its dtype fix-ups), else (False, None)."""
    if not _keeps(key_repr):
        return False, None
    known = _checks["known"]
    if known is None:
        known = _checks["known"] = _read_checks()
    k = (name, key_repr)
    if k in known:
        return True, known[k]
    return False, None


def record_check(name, key_repr, cast):
    if _keeps(key_repr):
        _checks["new"][(name, key_repr)] = cast


def _save_checks():
    """With each new executable: merge this process's new checks into the file."""
    new = _checks["new"]
    if not new:
        return
    try:
        import pickle
        import tempfile
        merged = _read_checks()
        merged.update(new)
        fd, tmp = tempfile.mkstemp(dir=_state["path"], prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(merged, f)
        os.replace(tmp, _checks_path())
        if _checks["known"] is not None:
            _checks["known"].update(new)
        _checks["new"] = {}
    except Exception:  # noqa: BLE001 - caching is best effort
        pass
