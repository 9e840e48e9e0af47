"""Compiling a job-wide program once per job (engine/compile/share.py).

The protocol runs here against an in-memory stand-in for jax.distributed's
key-value store, with two "processes" taking turns in one; the real store and
processes are exercised by tests/distributed (collectives_worker.py's
`compile_shared` check and the ZeRO-1/FSDP jobs)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from torch_xla.engine.compile import share
from torch_xla.engine.runtime import topology


class FakeStore:
    """The calls share.py makes, with the coordination service's semantics."""

    def __init__(self):
        self.kv = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        if key in self.kv and not allow_overwrite:
            raise RuntimeError(f"ALREADY_EXISTS: key {key} already exists.")
        self.kv[key] = value

    key_value_set_bytes = key_value_set

    def key_value_try_get_bytes(self, key):
        if key not in self.kv:
            raise RuntimeError(f"NOT_FOUND: Config key {key} not found.")
        return self.kv[key]

    def blocking_key_value_get(self, key, timeout_ms):
        if key not in self.kv:  # one thread: nobody else can set it while we wait
            raise RuntimeError(f"DEADLINE_EXCEEDED: GetKeyValue() timed out with key: {key}")
        return self.kv[key]

    def key_value_dir_get(self, prefix):
        prefix = prefix.rstrip("/") + "/"
        return [(k, v) for k, v in self.kv.items() if k.startswith(prefix)]

    def key_value_delete(self, key):
        self.kv.pop(key, None)


SECRET = "test-job-secret"


@pytest.fixture
def store(monkeypatch):
    s = FakeStore()
    monkeypatch.setenv("XLA_SHARE_COMPILATION_SECRET", SECRET)
    monkeypatch.setattr(share, "_client", lambda: s)
    monkeypatch.setattr(share, "_published", [])
    monkeypatch.setattr(topology, "world_size", lambda: 2)
    return s


def _as_rank(monkeypatch, r):
    monkeypatch.setattr(topology, "rank", lambda: r)


def _lowered(scale=2.0):
    return jax.jit(lambda a: jnp.tanh(a) * scale).lower(jax.ShapeDtypeStruct((5,), jnp.float32))


def _share(lowered, compile_fn):
    return share.compile_shared(lowered, lowered.as_text(), compile_fn)


def _counting_compile(calls):
    def compile_fn(lowered):
        calls.append(1)
        return lowered.compile()
    return compile_fn


def test_the_second_process_loads_what_the_first_compiled(store, monkeypatch):
    calls = []
    _as_rank(monkeypatch, 0)
    first = _share(_lowered(), _counting_compile(calls))
    _as_rank(monkeypatch, 1)
    second = _share(_lowered(), _counting_compile(calls))
    assert len(calls) == 1                       # XLA ran once for the job
    x = jnp.arange(5, dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(second(x)), np.asarray(first(x)))
    key = share.key_of(_lowered().as_text())
    assert store.kv[key + "/done"] == "ok" and (key + "/got/1") in store.kv


def test_a_different_program_is_compiled_by_its_own_process(store, monkeypatch):
    calls = []
    _as_rank(monkeypatch, 0)
    _share(_lowered(2.0), _counting_compile(calls))
    _as_rank(monkeypatch, 1)
    _share(_lowered(3.0), _counting_compile(calls))
    assert len(calls) == 2


def test_a_failed_compile_is_repeated_by_the_others_with_its_error(store, monkeypatch):
    def failing(lowered):
        raise ValueError("XLA refused it")
    _as_rank(monkeypatch, 0)
    with pytest.raises(ValueError, match="XLA refused it"):
        _share(_lowered(), failing)
    assert store.kv[share.key_of(_lowered().as_text()) + "/done"] == "fail"
    _as_rank(monkeypatch, 1)
    with pytest.raises(ValueError, match="XLA refused it"):   # compiled here, not waited for
        _share(_lowered(), failing)


def test_taken_executables_leave_the_store_and_a_late_process_compiles(store, monkeypatch):
    calls = []
    _as_rank(monkeypatch, 0)
    _share(_lowered(2.0), _counting_compile(calls))
    _as_rank(monkeypatch, 1)
    _share(_lowered(2.0), _counting_compile(calls))   # loads: every other process has it
    _as_rank(monkeypatch, 0)
    _share(_lowered(4.0), _counting_compile(calls))   # the claimant's next compile sweeps
    key = share.key_of(_lowered(2.0).as_text())
    assert key + "/exe" not in store.kv and store.kv[key + "/done"] == "ok"
    assert len(calls) == 2
    _as_rank(monkeypatch, 1)   # meets the program again (its own cache dropped it): compiles it
    f = _share(_lowered(2.0), _counting_compile(calls))
    assert len(calls) == 3
    np.testing.assert_allclose(np.asarray(f(jnp.ones(5, jnp.float32))), np.tanh(np.ones(5)) * 2, rtol=1e-6)


def test_published_bytes_are_bounded(store, monkeypatch):
    monkeypatch.setattr(share, "_MAX_PUBLISHED", 1)   # every entry is over it: only the newest stays
    _as_rank(monkeypatch, 0)
    for scale in (2.0, 3.0, 4.0):
        _share(_lowered(scale), lambda lowered: lowered.compile())
    exes = [k for k in store.kv if k.endswith("/exe")]
    assert exes == [share.key_of(_lowered(4.0).as_text()) + "/exe"]


def test_a_failing_store_means_compiling_here(monkeypatch):
    class Down(FakeStore):
        def key_value_set(self, key, value, allow_overwrite=False):
            raise RuntimeError("UNAVAILABLE: failed to connect to the coordinator")
    monkeypatch.setattr(share, "_client", lambda: Down())
    calls = []
    _share(_lowered(), _counting_compile(calls))
    assert calls == [1]


def test_single_process_never_touches_a_store():
    assert share._client() is None   # no job: the plain compile path


# ---------------------------------------------------------------------------
# what travels: data only, signed; nothing in an entry is unpickled or run

def test_an_entry_is_magic_json_header_executable_and_tag(store, monkeypatch):
    import hashlib
    import hmac
    import json
    import struct
    _as_rank(monkeypatch, 0)
    _share(_lowered(), lambda low: low.compile())
    key = share.key_of(_lowered().as_text())
    blob = store.kv[key + "/exe"]
    assert blob.startswith(share.MAGIC) and b"pickle" not in blob[:64]
    n, = struct.unpack(">I", blob[len(share.MAGIC):len(share.MAGIC) + 4])
    header = json.loads(blob[len(share.MAGIC) + 4:len(share.MAGIC) + 4 + n])
    assert header["key"] == key and header["format"] == share.FORMAT
    assert header["in_tree"] == {"tuple": [{"tuple": ["*"]}, {"dict": []}]}   # ((a,), {})
    assert header["out_tree"] == "*"
    assert len(blob) == len(share.MAGIC) + 4 + n + header["exe_len"] + 32
    assert hmac.compare_digest(blob[-32:], hmac.new(SECRET.encode(), blob[:-32], hashlib.sha256).digest())


def test_trees_round_trip_as_data():
    import jax
    for obj in [((1, 2), {}), [1, {"b": (None, 2), "a": [3]}], 1, (), {"x": [(), [1]]}]:
        t = jax.tree_util.tree_structure(obj)
        assert share.data_to_tree(share.tree_to_data(t)) == t
    import collections
    with pytest.raises(ValueError, match="no data form"):
        share.tree_to_data(jax.tree_util.tree_structure(collections.namedtuple("P", "a")(1)))
    for bad in [{"set": []}, {"tuple": "abc"}, {"dict": [[1, "*"]]}, "leaf", 3, {"tuple": [], "list": []}]:
        with pytest.raises(share.EntryRefused):
            share.data_to_tree(bad)


class _Boom:
    """Unpickling this creates a file: the proof that an entry was unpickled."""
    path = None

    def __reduce__(self):
        return (open, (self.path, "w"))


def _publish_forged(store, blob):
    key = share.key_of(_lowered().as_text())
    store.kv[key + "/claim"] = "0"
    store.kv[key + "/done"] = "ok"
    store.kv[key + "/exe"] = blob
    return key


def _loads_forged(store, monkeypatch, blob, match):
    key = _publish_forged(store, blob)
    _as_rank(monkeypatch, 1)
    calls = []
    with pytest.warns(UserWarning, match=match):
        f = _share(_lowered(), _counting_compile(calls))
    assert calls == [1]                          # refused: compiled here instead
    assert (key + "/got/1") not in store.kv
    np.testing.assert_allclose(np.asarray(f(jnp.ones(5, jnp.float32))), np.tanh(np.ones(5)) * 2, rtol=1e-6)


def test_a_pickle_in_the_store_is_refused_without_running(store, monkeypatch, tmp_path):
    import pickle
    from jax.experimental import serialize_executable
    # what the old format held: a pickle of serialize()'s triple, here with a payload that writes a file
    flag = tmp_path / "pwned"
    _Boom.path = str(flag)
    real = serialize_executable.serialize(_lowered().compile())
    blob = pickle.dumps((_Boom(),) + real[1:])
    _loads_forged(store, monkeypatch, blob, "not a torch_xla executable entry")
    assert not flag.exists()


def test_an_entry_signed_with_another_secret_is_refused(store, monkeypatch):
    key = share.key_of(_lowered().as_text())
    blob = share.encode(key, _lowered().compile(), b"someone else")
    _loads_forged(store, monkeypatch, blob, "signature does not verify")


def test_a_tampered_entry_is_refused(store, monkeypatch):
    key = share.key_of(_lowered().as_text())
    blob = bytearray(share.encode(key, _lowered().compile(), SECRET.encode()))
    blob[len(blob) // 2] ^= 1
    _loads_forged(store, monkeypatch, bytes(blob), "signature does not verify")


def test_another_programs_entry_is_refused(store, monkeypatch):
    # signed by the job, but the executable of another program: not run in this one's place
    other = _lowered(3.0)
    blob = share.encode(share.key_of(other.as_text()), other.compile(), SECRET.encode())
    _loads_forged(store, monkeypatch, blob, "entry of another program")


def test_a_signed_entry_with_a_malformed_header_is_refused(store, monkeypatch):
    import hashlib
    import hmac
    import struct
    h = b'{"format": 1, "key": "x", "__reduce__": "os.system"}'
    body = share.MAGIC + struct.pack(">I", len(h)) + h + b"\0" * 8
    blob = body + hmac.new(SECRET.encode(), body, hashlib.sha256).digest()
    _loads_forged(store, monkeypatch, blob, "header fields")


def test_without_a_secret_nothing_is_shared(monkeypatch):
    monkeypatch.delenv("XLA_SHARE_COMPILATION_SECRET", raising=False)
    from torch_xla.engine.runtime import distributed
    monkeypatch.setattr(distributed, "client", lambda: FakeStore())
    assert share._client() is None
    monkeypatch.setenv("XLA_SHARE_COMPILATION_SECRET", SECRET)
    assert share._client() is not None
