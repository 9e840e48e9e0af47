"""One compile per job for a program every process runs.

Every process of a multi-process job traces the same step and, without this,
asks XLA for the same job-wide program at the same moment: N processes on one
host run N identical compiles side by side (on a 2-core machine with 4
processes, each compile takes about four times as long). Here the first
process to reach a program compiles it and publishes the serialized
executable in jax.distributed's key-value store; the others load it.

The protocol needs no agreement on which graphs are compiled where: a process
claims a program's key with a create-only write; a process whose claim fails
knows the claimant is compiling that very program now, and waits for its
`done` mark. Loading is best effort: a missing, stale or unloadable entry (or
a claimant whose compile failed) means compiling here, as without sharing.
Executables are deleted from the store once every other process has taken
theirs, and a process keeps at most _MAX_PUBLISHED bytes there (oldest
dropped first: a program whose text differs on every rank is published and
never taken); the small claim and done keys stay, so a process that meets the
program after its entry is gone compiles it itself.

Only job-wide programs (those holding a collective) are shared: they are
compiled for the whole mesh, so any process can load them; a local program is
bound to the device of the process that compiled it.

XLA_SHARE_COMPILATION=0 turns it off; XLA_SHARE_COMPILATION_TIMEOUT (seconds,
default 1800) bounds the wait for another process's compile.
"""
import hashlib
import pickle
import threading

from ..base import config, metrics
from ..runtime import distributed, topology

_PREFIX = "torch_xla/exe/"
_lock = threading.Lock()
_published = []      # (key, bytes) of executables this process put in the store
_MAX_PUBLISHED = 256 << 20
_disabled = [False]  # set when this JAX lacks the store calls sharing needs


def _client():
    if _disabled[0] or not config.read("XLA_SHARE_COMPILATION"):
        return None
    c = distributed.client()
    if c is None:
        return None
    for name in ("key_value_set", "key_value_set_bytes", "key_value_try_get_bytes",
                 "blocking_key_value_get", "key_value_dir_get", "key_value_delete"):
        if not hasattr(c, name):
            _disabled[0] = True
            return None
    return c


def key_of(text):
    # the program's text decides its compile options too (compiler.CPU_OPTION_RULES)
    return _PREFIX + hashlib.sha256(text.encode()).hexdigest()


def compile_shared(lowered, text, compile_fn):
    """compile_fn(lowered) -> jax Compiled, run here or in another process of the job;
    text is lowered.as_text()."""
    client = _client()
    if client is None:
        return compile_fn(lowered)
    key = key_of(text)
    try:
        client.key_value_set(key + "/claim", str(topology.rank()))
    except Exception as e:  # noqa: BLE001
        if "already exists" not in str(e).lower():   # the store failed: compile as without it
            return compile_fn(lowered)
        # another process claimed it: it is compiling this program now
        loaded = _load(client, key)
        return loaded if loaded is not None else compile_fn(lowered)
    return _compile_and_publish(client, key, lowered, compile_fn)


def _compile_and_publish(client, key, lowered, compile_fn):
    _sweep(client)
    try:
        compiled = compile_fn(lowered)
    except BaseException:
        _mark(client, key, "fail")
        raise
    try:
        from jax.experimental import serialize_executable
        blob = pickle.dumps(serialize_executable.serialize(compiled))
        client.key_value_set_bytes(key + "/exe", blob)
    except Exception:  # noqa: BLE001 - the others compile for themselves
        _mark(client, key, "fail")
        return compiled
    _mark(client, key, "ok")
    with _lock:
        _published.append((key, len(blob)))
    return compiled


def _mark(client, key, state):
    try:
        client.key_value_set(key + "/done", state)
    except Exception:  # noqa: BLE001
        pass


def _load(client, key):
    timeout_ms = int(config.read("XLA_SHARE_COMPILATION_TIMEOUT") * 1000)
    try:
        state = client.blocking_key_value_get(key + "/done", timeout_ms)
    except Exception:  # noqa: BLE001 - timed out: compile here
        return None
    if state != "ok":
        return None
    try:
        blob = client.key_value_try_get_bytes(key + "/exe")
    except Exception:  # noqa: BLE001 - already deleted (every other process took it)
        return None
    try:
        from jax.experimental import serialize_executable
        payload, in_tree, out_tree = pickle.loads(blob)
        compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # noqa: BLE001 - e.g. another jaxlib: compile here
        return None
    try:
        client.key_value_set(f"{key}/got/{topology.rank()}", "1")
    except Exception:  # noqa: BLE001
        pass
    metrics.counter("SharedCompileLoad")
    return compiled


def _sweep(client):
    """Delete published executables every other process has loaded, then the
    oldest while this process holds more than _MAX_PUBLISHED bytes in the store."""
    others = topology.world_size() - 1
    with _lock:
        keep = []
        for key, size in _published:
            try:
                taken = len(client.key_value_dir_get(key + "/got/"))
            except Exception:  # noqa: BLE001
                taken = 0
            if taken < others:
                keep.append((key, size))
            else:
                _delete(client, key)
        while keep and sum(size for _, size in keep) > _MAX_PUBLISHED:
            _delete(client, keep.pop(0)[0])
        _published[:] = keep


def _delete(client, key):
    try:
        client.key_value_delete(key + "/exe")
    except Exception:  # noqa: BLE001
        pass
