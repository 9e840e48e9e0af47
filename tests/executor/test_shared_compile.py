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


@pytest.fixture
def store(monkeypatch):
    s = FakeStore()
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
