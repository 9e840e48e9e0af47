"""The engine's seams, used as a newcomer would: subscribe to the executor's
events, override a knob, capture a Graph, register a platform-only rule and a
compile strategy."""
import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.engine.base import config, events
from torch_xla.engine.compile import cache, compiler
from torch_xla.engine.ir.graph import Graph
from torch_xla.engine.lazy import executor
from torch_xla.engine.ops import registry
from torch_xla.engine.runtime import topology


def test_events_reach_subscribers_in_order_and_cost_nothing_unwatched(dev):
    seen = []

    def on(kind):
        def fn(**kw):
            seen.append((kind, kw.get("reason")))
        return fn

    subs = {k: on(k) for k in ("captured", "compile_begin", "compiled", "executed", "barrier")}
    for k, fn in subs.items():
        events.subscribe(k, fn)
    try:
        x = torch.arange(5.0, device=dev) * 3.25   # a shape no other test compiles first
        xm.mark_step()
        assert [k for k, _ in seen] == ["captured", "compile_begin", "compiled", "executed", "barrier"]
        assert all(r == "user mark_step" for _, r in seen)
        seen.clear()
        x = torch.arange(5.0, device=dev) * 3.25
        xm.mark_step()
        assert [k for k, _ in seen] == ["captured", "executed", "barrier"]   # cached: no compile
    finally:
        for k, fn in subs.items():
            events.unsubscribe(k, fn)
    assert not events.wanted("captured")
    assert x.cpu().tolist() == [0.0, 3.25, 6.5, 9.75, 13.0]


def test_a_failed_subscriber_note_is_attached_to_the_error(dev, monkeypatch):
    import pytest

    def note(graph, stage, error):
        return f"noted: {stage} of {len(graph.order)} ops"
    events.subscribe("failed", note)

    def broken(self, g, inputs):
        raise ValueError("strategy exploded")
    monkeypatch.setattr(compiler.LocalJit, "compile", broken)
    try:
        with pytest.raises(ValueError, match="strategy exploded") as ei:
            (torch.ones(3, 7, device=dev) * 11).cpu()
    finally:
        events.unsubscribe("failed", note)
    assert "noted: compile of 2 ops" in getattr(ei.value, "__notes__", [])


def test_config_override_and_defaults():
    assert config.read("XLA_SAVE_TENSORS_FMT") == "text"
    with config.override(XLA_SAVE_TENSORS_FMT="dot", XLA_COLLECTIVE_TIMEOUT=5):
        assert config.read("XLA_SAVE_TENSORS_FMT") == "dot"
        assert config.read("XLA_COLLECTIVE_TIMEOUT") == 5.0
    assert config.read("XLA_SAVE_TENSORS_FMT") == "text"
    assert config.read("XLA_COMPILATION_CACHE_SIZE") >= 1


def test_graph_key_is_structural(dev):
    def graph_of(n, scale):
        a = torch.ones(n, device=dev)
        b = a * scale + 1
        return Graph.capture(executor.pending_roots([b]))

    g1, g2, g3 = graph_of(4, 2.5), graph_of(4, 7.5), graph_of(5, 2.5)
    assert g1.key == g2.key               # a new scalar value is data, not structure
    assert g1.key != g3.key               # a new shape is a new graph
    assert [n.kind for n in g1.nodes][-1] == 2 and len(g1.nodes) == len(g1.order) + len(g1.params) + len(g1.scalars)
    assert g1.digest(b"salt") == g2.digest(b"salt") != g3.digest(b"salt")


def test_platform_rule_wins_on_its_platform_only():
    func = torch.ops.aten.erfinv.default
    generic = registry.find(func)
    assert registry.find(func, "cpu") is generic

    def special(x):
        return x
    registry.lower("erfinv", platform="tpu")(special)
    try:
        assert registry.find(func, "tpu") is special
        assert registry.find(func, "cpu") is generic
    finally:
        registry.PLATFORM_LOWERINGS.pop((func.overloadpacket, "tpu"), None)


def test_a_strategy_is_a_registration(dev, monkeypatch):
    calls = []

    class Counting(compiler.LocalJit):
        def compile(self, graph, inputs):
            calls.append(len(graph.order))
            return super().compile(graph, inputs)

    monkeypatch.setattr(compiler, "_instances", {})
    monkeypatch.setitem(compiler._STRATEGIES, topology.SINGLE, Counting)
    cache.clear()
    y = (torch.full((2, 3), 4.0, device=dev).sqrt() + 1).cpu()
    assert y.tolist() == [[3.0] * 3] * 2
    assert calls and calls[0] >= 2


def test_out_of_memory_becomes_torch_oom_naming_the_largest_values(dev, monkeypatch):
    import jax
    import pytest

    def exhausted(self, graph, inputs):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4096 bytes.")
    monkeypatch.setattr(compiler.LocalJit, "compile", exhausted)
    a = torch.ones(64, 32, device=dev)
    with pytest.raises(torch.OutOfMemoryError) as ei:
        (a @ a.T + 5.5).cpu()
    msg = str(ei.value)
    assert "ran out of memory to compile a graph" in msg and "RESOURCE_EXHAUSTED" in msg
    assert "aten::mm -> float32[64, 64]" in msg
