"""Graphs kept by hash and run on caller-supplied inputs: the primitives
upstream's dynamo bridge is built from (`_get_tensors_xla_device_data_node`,
`_xla_warm_up_cache`, `_run_cached_graph`, `GraphInputMatcher`)."""
import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla import _XLAC
from torch_xla._dynamo.dynamo_bridge import GraphInputMatcher


@pytest.fixture
def dev():
    return torch_xla.device()


def _trace(fn, args, dev):
    """Trace fn on XLA copies of args; -> (hash, matcher, outputs)."""
    xs = [a.to(dev) for a in args]
    torch_xla.sync()
    ids = [_XLAC._xla_get_tensor_id(x) for x in xs]
    outs = fn(*xs)
    h = _XLAC._get_graph_hash(outs)
    in_ids, in_vals = _XLAC._get_tensors_xla_device_data_node(outs)
    matcher = GraphInputMatcher({i: k for k, i in enumerate(ids)}, in_ids, in_vals, set(ids))
    _XLAC._xla_warm_up_cache(outs, [])
    return h, matcher, outs


def test_tensor_ids_are_unique_and_stable(dev):
    a, b = torch.ones(2, device=dev), torch.ones(2, device=dev)
    ia, ib = _XLAC._xla_get_tensor_id(a), _XLAC._xla_get_tensor_id(b)
    assert ia != ib
    a.add_(1)
    assert _XLAC._xla_get_tensor_id(a) == ia


def test_device_data_inputs_of_a_graph(dev):
    t1, t2 = torch.randn(4, 3).to(dev), torch.randn(4, 3).to(dev)
    t4 = (t1 + t2) * t2
    ids, vals = _XLAC._get_tensors_xla_device_data_node([t4])
    assert sorted(ids) == sorted([_XLAC._xla_get_tensor_id(t1), _XLAC._xla_get_tensor_id(t2)])
    assert sorted(_XLAC._get_tensors_handle(vals)) == sorted(_XLAC._get_tensors_handle([t1, t2]))


def test_cached_graph_runs_on_new_arguments_and_keeps_weights(dev):
    torch.manual_seed(0)
    lin = nn.Linear(5, 3)
    xla_lin = nn.Linear(5, 3).to(dev)
    xla_lin.load_state_dict(lin.state_dict())
    h, matcher, outs = _trace(lambda x: (xla_lin(x),), [torch.randn(6, 5)], dev)
    assert matcher.graph_input_xla_values.count(None) == 1   # the argument is not kept
    x = torch.randn(6, 5)
    (got,) = _XLAC._run_cached_graph(h, matcher([x.to(dev)]))
    torch.testing.assert_close(got.cpu(), lin(x).detach(), rtol=1e-5, atol=1e-5)
    assert "RunCachedGraphInputData" in met.metric_names()


@pytest.mark.parametrize("inplace,repeat,n", [(False, False, 2), (True, False, 3), (True, True, 3)])
def test_outputs_are_the_distinct_computed_values(dev, inplace, repeat, n):
    # an argument returned unchanged is not an output; written in place it is, once
    def fn(a, b, c):
        if inplace:
            b.zero_()
        return (a + b, a + c, b) + ((b,) if repeat else ())

    h, matcher, _ = _trace(fn, [torch.rand(2), torch.rand(2), torch.rand(2)], dev)
    a, b, c = torch.rand(2), torch.rand(2), torch.rand(2)
    outs = _XLAC._run_cached_graph(h, matcher([a.to(dev), b.to(dev), c.to(dev)]))
    assert len(outs) == n
    torch.testing.assert_close(outs[0].cpu(), a if inplace else a + b)
    torch.testing.assert_close(outs[1].cpu(), a + c)


def test_cached_graph_errors_name_the_graph_and_the_inputs(dev):
    h, matcher, _ = _trace(lambda a: (a * 2,), [torch.rand(3)], dev)
    with pytest.raises(RuntimeError, match="no cached graph with hash nope"):
        _XLAC._run_cached_graph("nope", [])
    with pytest.raises(ValueError, match=r"takes 1 inputs \(f32\[3\]"):
        _XLAC._run_cached_graph(h, [])
    with pytest.raises(ValueError, match=r"input 0 .* is f32\[3\].*got f32\[4\]"):
        _XLAC._run_cached_graph(h, [torch.rand(4).to(dev)])


def test_need_materialization_and_clear_pending(dev):
    t1 = torch.randn(3)
    assert _XLAC._check_tensor_need_materialization([t1]) == [False]
    t1 = t1.to(dev)
    t2 = t1 * 2
    assert _XLAC._check_tensor_need_materialization([t1, t2]) == [False, True]
    _XLAC._clear_pending_irs(str(dev))
    assert "aten::mul" not in _XLAC._get_xla_tensors_text([t2])
    with pytest.raises(RuntimeError, match="placeholder"):
        t2.cpu()


def test_seed_info(dev):
    import torch_xla.core.xla_model as xm
    xm.set_rng_state(23, str(dev))
    assert _XLAC._get_base_seed_as_tensor(str(dev)).item() == 23
    assert _XLAC._get_seed_info_id() == -127389


def test_unsupported_nodes_collector_finds_fallbacks_and_keeps_counters(dev):
    # upstream's dynamo_bridge.UnsupportedNodesCollector: the FX nodes that cannot
    # stay in an XLA graph (here nonzero, which runs on the CPU fallback)
    import torch_xla.debug.metrics as met
    from torch_xla._dynamo import dynamo_bridge as bridge

    class M(torch.nn.Module):
        def forward(self, a, b):
            c = a + b
            return c * 2, torch.nonzero(c > 0)

    gm = torch.fx.symbolic_trace(M())
    met.clear_counters()
    torch_xla._XLAC._xla_increment_counter("UncachedCompile", 3)
    collector = bridge.UnsupportedNodesCollector(gm)
    collector.run(torch.randn(4).to(dev), torch.randn(4).to(dev))
    assert [n.name for n in collector.get_unsupported_nodes()] == ["nonzero"]
    assert met.counter_value("UncachedCompile") == 3 and met.executed_fallback_ops() == []
