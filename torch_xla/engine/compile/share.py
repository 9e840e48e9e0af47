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

What travels (nothing in it is unpickled or evaluated): an entry is

    MAGIC | header length (4 bytes, big-endian) | header | executable | tag

where the header is JSON (format, the program's key, jax/jaxlib versions,
platform, device count, the input and output pytrees as data, the length of
the executable), the executable is XLA's own serialization of the compiled
program (the PjRt client's serialize_executable), and the tag is
HMAC-SHA256 over everything before it under XLA_SHARE_COMPILATION_SECRET. A
loader checks the tag before it reads anything else and then builds the
jax Compiled from its own lowering of the same program, with the received
XLA executable in place of a compile (so avals, shardings and trees are its
own; the trees in the header must equal them). An entry that does not parse,
or whose tag does not verify, is refused with a warning
(SharedCompileRefused) and the program compiled here.

The executable is machine code that runs when the program runs, so anyone who
can write to the coordinator's store could otherwise run code in every
process: hence the tag, and no sharing at all without a secret. The launchers
(torch_xla.launch / xmp.spawn on one host) give their replicas a fresh secret
per job through the environment; under torchrun or across hosts every process
needs the same XLA_SHARE_COMPILATION_SECRET, or each compiles for itself.

XLA_SHARE_COMPILATION=0 turns it off; XLA_SHARE_COMPILATION_TIMEOUT (seconds,
default 1800) bounds the wait for another process's compile.
"""
import hashlib
import hmac
import json
import struct
import threading
import warnings

from ..base import config, metrics
from ..runtime import distributed, topology

_PREFIX = "torch_xla/exe/"
_lock = threading.Lock()
_published = []      # (key, bytes) of executables this process put in the store
_MAX_PUBLISHED = 256 << 20
_disabled = [False]  # set when this JAX lacks the store calls sharing needs

MAGIC = b"torch_xla-exe\x00"
FORMAT = 1
_TAG = 32                    # HMAC-SHA256
_MAX_HEADER = 1 << 20
_MAX_DEPTH = 64              # nesting of a pytree in the header


class EntryRefused(ValueError):
    """A store entry that is not a well-formed, signed executable of this program."""


def _client():
    if _disabled[0] or not config.read("XLA_SHARE_COMPILATION") or not _secret():
        return None
    c = distributed.client()
    if c is None:
        return None
    for name in ("key_value_set", "key_value_set_bytes", "key_value_try_get_bytes",
                 "blocking_key_value_get", "key_value_dir_get", "key_value_delete"):
        if not hasattr(c, name):
            _disabled[0] = True
            return None
    if _hook() is None:
        _disabled[0] = True
        return None
    return c


def _secret():
    return config.read("XLA_SHARE_COMPILATION_SECRET").encode()


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
        loaded = _load(client, key, lowered)
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
        blob = encode(key, compiled, _secret())
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


def _load(client, key, lowered):
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
        compiled = decode_and_load(blob, key, lowered, _secret())
    except EntryRefused as e:
        metrics.counter("SharedCompileRefused")
        warnings.warn(f"torch_xla: refused the shared executable {key}: {e}; compiling it here", stacklevel=2)
        return None
    except Exception:  # noqa: BLE001 - e.g. another jaxlib: compile here
        return None
    try:
        client.key_value_set(f"{key}/got/{topology.rank()}", "1")
    except Exception:  # noqa: BLE001
        pass
    metrics.counter("SharedCompileLoad")
    return compiled


# ---------------------------------------------------------------------------
# the entry format

def _env():
    import jax
    import jaxlib
    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", "")}


def tree_to_data(treedef):
    """A PyTreeDef of tuples, lists, dicts with string keys and None -> JSON data
    ("*" a leaf); other nodes (namedtuples, registered classes) -> ValueError."""
    import jax
    leaf = object()

    def conv(x, depth):
        if depth > _MAX_DEPTH:
            raise ValueError("pytree too deep")
        if x is leaf:
            return "*"
        if x is None:
            return None
        if type(x) is tuple:
            return {"tuple": [conv(c, depth + 1) for c in x]}
        if type(x) is list:
            return {"list": [conv(c, depth + 1) for c in x]}
        if type(x) is dict and all(type(k) is str for k in x):
            return {"dict": [[k, conv(x[k], depth + 1)] for k in x]}   # treedef order
        raise ValueError(f"pytree node {type(x).__name__} has no data form")

    return conv(jax.tree_util.tree_unflatten(treedef, [leaf] * treedef.num_leaves), 0)


def data_to_tree(data):
    """The inverse of tree_to_data; EntryRefused on anything else."""
    import jax
    leaf = _Leaf()

    def conv(d, depth):
        if depth > _MAX_DEPTH:
            raise EntryRefused("pytree too deep")
        if d == "*" and type(d) is str:
            return leaf
        if d is None:
            return None
        if type(d) is dict and len(d) == 1:
            (kind, items), = d.items()
            if type(items) is list:
                if kind == "tuple":
                    return tuple(conv(c, depth + 1) for c in items)
                if kind == "list":
                    return [conv(c, depth + 1) for c in items]
                if kind == "dict" and all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in items):
                    return {p[0]: conv(p[1], depth + 1) for p in items}
        raise EntryRefused(f"not a pytree description: {str(d)[:80]!r}")

    return jax.tree_util.tree_structure(conv(data, 0), is_leaf=lambda x: x is leaf)


class _Leaf:
    pass


def _runtime_executable(compiled):
    exe = compiled.runtime_executable()
    ser = getattr(exe.client, "serialize_executable", None)
    return ser(exe) if ser is not None else exe.serialize()


def encode(key, compiled, secret):
    """jax Compiled -> the bytes of a store entry (no pickle anywhere)."""
    if not secret:
        raise ValueError("no secret to sign the entry with")
    exe = _runtime_executable(compiled)
    if not isinstance(exe, bytes):
        exe = bytes(exe)
    backend = compiled.runtime_executable().client
    header = dict(format=FORMAT, key=key, **_env(), platform=backend.platform,
                  platform_version=backend.platform_version, devices=len(backend.devices()),
                  in_tree=tree_to_data(compiled.in_tree), out_tree=tree_to_data(compiled.out_tree),
                  exe_len=len(exe))
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = MAGIC + struct.pack(">I", len(h)) + h + exe
    return body + hmac.new(secret, body, hashlib.sha256).digest()


_HEADER_TYPES = {"format": int, "key": str, "jax": str, "jaxlib": str, "platform": str,
                 "platform_version": str, "devices": int, "in_tree": object, "out_tree": object,
                 "exe_len": int}


def parse(blob, key, secret):
    """The bytes of a store entry -> (header, executable bytes), or EntryRefused.
    The tag is checked before anything else is read."""
    if not isinstance(blob, (bytes, bytearray)):
        raise EntryRefused(f"not bytes but {type(blob).__name__}")
    blob = bytes(blob)
    if not secret:
        raise EntryRefused("no XLA_SHARE_COMPILATION_SECRET to check it with")
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4 + _TAG:
        raise EntryRefused(f"not a torch_xla executable entry (starts {blob[:16]!r})")
    body, tag = blob[:-_TAG], blob[-_TAG:]
    if not hmac.compare_digest(tag, hmac.new(secret, body, hashlib.sha256).digest()):
        raise EntryRefused("its signature does not verify under this process's XLA_SHARE_COMPILATION_SECRET "
                           "(not written by this job, or the processes were given different secrets)")
    n, = struct.unpack(">I", body[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    if n > _MAX_HEADER or start + n > len(body):
        raise EntryRefused("header length out of range")
    try:
        header = json.loads(body[start:start + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise EntryRefused(f"header is not JSON: {e}") from None
    if type(header) is not dict or set(header) != set(_HEADER_TYPES) or any(
            t is not object and type(header[k]) is not t for k, t in _HEADER_TYPES.items()):
        raise EntryRefused(f"header fields {sorted(header) if type(header) is dict else type(header).__name__} "
                           f"are not {sorted(_HEADER_TYPES)}")
    if header["format"] != FORMAT:
        raise EntryRefused(f"format {header['format']}, this process reads {FORMAT}")
    if header["key"] != key:
        raise EntryRefused(f"it is the entry of another program ({header['key']})")
    exe = body[start + n:]
    if len(exe) != header["exe_len"]:
        raise EntryRefused(f"executable is {len(exe)} bytes, header says {header['exe_len']}")
    return header, exe


def decode_and_load(blob, key, lowered, secret):
    """A store entry -> jax Compiled of `lowered` running the received executable."""
    header, exe = parse(blob, key, secret)
    in_tree, out_tree = data_to_tree(header["in_tree"]), data_to_tree(header["out_tree"])
    if in_tree != lowered.in_tree or out_tree != lowered.out_tree:
        raise EntryRefused(f"its trees {in_tree} -> {out_tree} are not this program's "
                           f"{lowered.in_tree} -> {lowered.out_tree}")
    backend = _backend()
    here = dict(_env(), platform=backend.platform, platform_version=backend.platform_version,
                devices=len(backend.devices()))
    diff = {k: (header[k], v) for k, v in here.items() if header[k] != v}
    if diff:   # not an attack: a job of mixed installs; compile here
        raise RuntimeError(f"built by another runtime: {diff}")
    from jax._src.lib import xla_client as xc
    devices = tuple(backend.devices())
    try:
        loaded = backend.deserialize_executable(exe, executable_devices=xc.DeviceList(devices))
    except TypeError:   # an older jaxlib: no executable_devices
        loaded = backend.deserialize_executable(exe)
    return _compile_with(lowered, loaded)


def _backend():
    import jax
    from ..runtime.platform import jax_platform
    return jax.devices(jax_platform())[0].client


# lowered.compile() with a given XLA executable in place of XLA's compile: JAX
# builds the Compiled (avals, shardings, layouts, trees) from this process's own
# lowering. The hook stands in for pxla._cached_compilation once, for every
# thread; only the thread that set _given.exe gets the given executable.
_given = threading.local()
_hooked = []


def _hook():
    with _lock:
        if not _hooked:
            try:
                from jax._src.interpreters import pxla
                orig = pxla._cached_compilation
            except (ImportError, AttributeError):   # JAX moved it: no sharing
                _hooked.append(None)
                return None

            def _cached_compilation(*args, **kwargs):
                exe = getattr(_given, "exe", None)
                if exe is not None:
                    _given.exe = None
                    _given.used = True
                    return exe
                return orig(*args, **kwargs)

            pxla._cached_compilation = _cached_compilation
            _hooked.append(orig)
        return _hooked[0]


def _compile_with(lowered, loaded):
    if _hook() is None:
        raise RuntimeError("this JAX has no compile step to hand an executable to")
    _given.exe, _given.used = loaded, False
    try:
        compiled = lowered.compile()
    finally:
        used, _given.exe = _given.used, None
    if not used:   # JAX compiled it itself: this JAX builds Compiled some other way
        _disabled[0] = True
        raise RuntimeError("JAX did not take the shared executable")
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
