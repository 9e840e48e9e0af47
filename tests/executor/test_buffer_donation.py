"""Explicit buffer donors: `_set_buffer_donation(t, True)` lets the next graph
that reads t reuse its buffer; t's buffer is gone afterwards, and reading it is
a clear error. Graph hashes count the marks under alias_with_buffer_donor_config."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla import _XLAC
from torch_xla.utils.buffer_donor_context import alias_with_buffer_donor_config


@pytest.fixture
def dev():
    return torch_xla.device()


def test_only_device_data_can_be_marked(dev):
    t = torch.randn(3, 3).to(dev)
    met.clear_counters()
    assert _XLAC._set_buffer_donation(t, True) and _XLAC._get_buffer_donation(t)
    assert met.counter_value("XlaSetBufferDonation") == 1
    pending = t + 1
    assert not _XLAC._set_buffer_donation(pending, True)
    assert not _XLAC._get_buffer_donation(pending)
    assert _XLAC._set_buffer_donation(t, False) and not _XLAC._get_buffer_donation(t)


def test_marked_input_is_consumed_by_the_next_graph(dev):
    cpu = torch.randn(4, 2)
    t0, t1 = cpu.to(dev), torch.ones(4, 2).to(dev)
    _XLAC._set_buffer_donation(t0, True)
    out = t0 + t1
    torch_xla.sync(wait=True)
    torch.testing.assert_close(out.cpu(), cpu + 1)
    assert "Data Handle: Deleted" in _XLAC._get_xla_tensor_debug_info(t0)
    with pytest.raises(RuntimeError, match="is deleted"):
        _XLAC._get_tensors_handle([t0])
    with pytest.raises(RuntimeError, match=r"buffer \(f32\[4,2\].*is deleted.*donated"):
        t0.cpu()
    torch.testing.assert_close(t1.cpu(), torch.ones(4, 2))   # unmarked inputs stay


def test_graph_hash_counts_marks_only_with_the_config(dev):
    t = torch.randn(5, 5).to(dev)
    res = torch.cos(t)
    plain = _XLAC._get_graph_hash([res])
    assert _XLAC._set_buffer_donation(t, True)
    assert _XLAC._get_graph_hash([res]) == plain
    assert not _XLAC._xla_get_enable_alias_with_buffer_donor_config()
    with alias_with_buffer_donor_config() as saved:
        assert saved is False
        assert _XLAC._get_graph_hash([res]) != plain
    assert not _XLAC._xla_get_enable_alias_with_buffer_donor_config()
    _XLAC._set_buffer_donation(t, False)


def test_dynamo_step_written_in_place_keeps_donating_without_recompiling(dev):
    def step(x):
        x += 0.5 * torch.cos(x)

    cpu = torch.randn(5, 5)
    x = cpu.to(dev)
    compiled = torch.compile(step, backend="openxla")
    torch_xla.sync()
    met.clear_all()
    assert _XLAC._set_buffer_donation(x, True)
    for _ in range(5):
        compiled(x)
        cpu += 0.5 * torch.cos(cpu)
    torch_xla.sync()
    torch.testing.assert_close(x.cpu(), cpu)
    assert not _XLAC._get_buffer_donation(x)   # its buffer is a new one now
    assert met.metric_data("CompileTime")[0] == 1


def test_dynamo_marked_argument_is_consumed_and_unmarked_ones_are_kept(dev):
    def scale(x):
        torch.ops.xla.dynamo_set_buffer_donor_(x, True)
        return x * 1.5

    compiled = torch.compile(scale, backend="openxla")
    a = torch.randn(3).to(dev)
    want = a.cpu() * 1.5
    out = compiled(a)
    torch_xla.sync()   # the call is a node of the step's graph: the step's barrier donates
    torch.testing.assert_close(out.cpu(), want)
    assert "Data Handle: Deleted" in _XLAC._get_xla_tensor_debug_info(a)
    # later calls add the node without running the op, so their argument is not a donor:
    # the executable gets a copy and the caller's tensor keeps its value
    for _ in range(3):
        b = torch.randn(3)
        xb = b.to(dev)
        torch.testing.assert_close(compiled(xb).cpu(), b * 1.5)
        torch.testing.assert_close(xb.cpu(), b)
