"""One launch path: every caller that runs a compiled graph goes through
lazy/launch.py, so a barrier, a replayed step and a graph kept by hash emit the
same events, count the same metrics and turn a device out-of-memory into the
same error."""
import ast
import os

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.engine import api
from torch_xla.engine.base import events
from torch_xla.engine.compile import cache

PKG = os.path.dirname(torch_xla.__file__)


def _f(x):
    return [(x * 2.5 + 1).sum(0)]


def _barrier(x):
    out = _f(x)[0]
    torch_xla.sync()
    return out


class _Caller:
    """Runs _f through one of the three callers; `run` is the launch under test."""

    def __init__(self, kind, x):
        self.kind, self.x = kind, x
        if kind == "replay":
            self.step, _ = api.capture_step(_f, [x])
            assert self.step.replayable
        elif kind == "cached graph":
            y = _f(x)[0]
            self.hash = api.graph_hash([y])
            api.warm_up_cache([y])
            self.inputs = api.graph_input_data([y])[1]
            torch_xla.sync()

    def run(self):
        if self.kind == "barrier":
            return _barrier(self.x)
        if self.kind == "replay":
            return self.step.run([self.x])[0]
        return api.run_cached_graph(self.hash, self.inputs)[0]


CALLERS = ["barrier", "replay", "cached graph"]


@pytest.fixture
def x():
    t = torch.arange(12.).reshape(4, 3).to("xla")
    torch_xla.sync()
    return t


def _record(kinds):
    seen = []
    subs = {}
    for k in kinds:
        subs[k] = (lambda k: lambda **payload: seen.append(k))(k)
        events.subscribe(k, subs[k])
    return seen, subs


def _unsubscribe(subs):
    for k, fn in subs.items():
        events.unsubscribe(k, fn)


@pytest.mark.parametrize("kind", CALLERS)
def test_each_caller_emits_the_same_events_and_counts_the_same_metrics(kind, x):
    caller = _Caller(kind, x)
    caller.run()                       # compiled by now, whatever the caller
    expect = (x.cpu() * 2.5 + 1).sum(0)
    before = {m: met.counter_value(m) or 0 for m in ("CachedCompile", "UncachedCompile")}
    n_exec = (met.metric_data("ExecuteTime") or (0,))[0]
    seen, subs = _record(["captured", "compile_begin", "compiled", "executed", "failed"])
    try:
        out = caller.run()
    finally:
        _unsubscribe(subs)
    torch.testing.assert_close(out.cpu(), expect)
    assert seen == ["captured", "executed"]
    assert met.counter_value("CachedCompile") == before["CachedCompile"] + 1
    assert (met.counter_value("UncachedCompile") or 0) == before["UncachedCompile"]
    assert met.metric_data("ExecuteTime")[0] == n_exec + 1


class _Exhausted:
    """An executable whose run fails as a device out of memory does."""
    hash = 1
    donated = ()

    def compiled(self, *inputs):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4096 bytes.")


@pytest.mark.parametrize("kind", CALLERS)
def test_each_caller_turns_a_device_out_of_memory_into_the_same_error(kind, x, monkeypatch):
    caller = _Caller(kind, x)
    caller.run()
    monkeypatch.setattr(cache, "lookup", lambda key: _Exhausted())
    seen, subs = _record(["failed"])
    try:
        with pytest.raises(torch.OutOfMemoryError, match="ran out of memory to run a graph of"):
            caller.run()
    finally:
        _unsubscribe(subs)
    assert seen == ["failed"]


def test_no_other_module_calls_a_compiled_executable():
    # compile/ wraps what jax.jit compiled (input layouts, job-wide programs);
    # lazy/launch.py is the one caller of the result
    allowed = {os.path.join(PKG, "engine", "lazy", "launch.py")}
    bad = []
    for dirpath, _dirs, files in os.walk(PKG):
        if os.path.join("engine", "compile") in dirpath:
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            tree = ast.parse(open(path).read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "compiled" and path not in allowed:
                    bad.append(f"{os.path.relpath(path, PKG)}:{node.lineno} calls .compiled(...)")
    assert not bad, "\n".join(bad)


def test_a_failed_launch_keeps_no_tensor_alive(x, monkeypatch):
    # the error's frames must not form a cycle with the error: the tensors of the
    # failed graph would stay pending (and join every later barrier) until a
    # garbage collection
    import gc
    from torch_xla.engine.lazy import state
    monkeypatch.setattr(cache, "lookup", lambda key: _Exhausted())
    gc.disable()
    try:
        try:
            (x * 7).cpu()
        except torch.OutOfMemoryError:
            pass
        assert not [b for b in state.live_pending() if b.aval == ((4, 3), torch.float32)]
    finally:
        gc.enable()


def test_the_execute_time_watcher_waits_on_an_output_not_yet_donated():
    # a run's first outputs are the new values of weights written in place, which
    # the next run takes as donations; the watcher looks from the last output
    import jax.numpy as jnp
    from torch_xla.engine.lazy import exec_time
    kept = jnp.ones(3) + 1
    gone = [jnp.ones(3) + 2, jnp.ones(3) + 3]
    for a in gone:
        a.delete()
    assert exec_time._live(gone + [kept]) is kept
    assert exec_time._live(gone) is None
    assert exec_time._finished(gone)     # all donated: nothing left to wait on
    exec_time._await(gone + [kept])      # returns once `kept` is ready
    assert kept.is_ready()
