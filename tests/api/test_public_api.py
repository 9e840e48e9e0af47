"""The single-device public API, with upstream's signatures and return types."""
import re
import time

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.test.test_utils as test_utils
from torch_xla.utils.utils import SampleGenerator


def test_version_names_the_upstream_api_release():
    assert re.match(r"^2\.9\.\d+", torch_xla.__version__)
    from importlib.metadata import version
    assert version("torch_xla") == torch_xla.__version__


def test_manual_seed_and_rng_state(dev):
    torch_xla.manual_seed(123)
    a = torch.randn(5, device=dev).cpu()
    xm.set_rng_state(123)
    assert xm.get_rng_state() == 123
    b = torch.randn(5, device=dev).cpu()
    torch.manual_seed(123)
    c = torch.randn(5, device=dev).cpu()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    assert not torch.equal(torch.randn(5, device=dev).cpu(), a)


def test_master_print(capsys):
    xm.master_print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"


def test_rate_tracker():
    tracker = xm.RateTracker()
    tracker.add(100)
    time.sleep(0.05)
    assert tracker.rate() > 0
    assert tracker.global_rate() > 0


def test_sample_generator():
    data = (torch.zeros(2, 3), torch.ones(2))
    gen = SampleGenerator(data=data, sample_count=3)
    assert len(gen) == 3
    items = list(gen)
    assert len(items) == 3 and items[0] is data
    assert len(list(gen)) == 3  # iterable again


def test_test_utils(capsys, dev):
    assert test_utils.get_summary_writer(None) is None
    assert re.match(r"\d\d:\d\d:\d\d", test_utils.now())
    test_utils.print_training_update(dev, 7, torch.tensor(0.5, device=dev), 10.0, 9.0, epoch=2)
    test_utils.print_test_update(dev, 93.5, epoch=2)
    out = capsys.readouterr().out
    assert "Epoch=2 Step=7 Loss=0.50000 Rate=10.00 GlobalRate=9.00" in out
    assert "Accuracy=93.50" in out


def test_metrics_core_names(dev):
    x = torch.ones(4).to(dev)
    (x + 2).sum().item()
    xm.mark_step()
    names = set(met.metric_names())
    assert {"CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"} <= names
    assert met.counter_value("UncachedCompile") == 1
    assert met.counter_value("MarkStep") == 1
    assert met.counter_value("NoSuchCounter") is None
    total, acc, samples = met.metric_data("CompileTime")
    assert total == 1 and acc > 0 and len(samples) == 1
    report = met.metrics_report()
    assert "Metric: CompileTime" in report and "Counter: UncachedCompile" in report
    short = met.short_metrics_report()
    assert "CompileTime" in short
    met.clear_all()
    assert met.counter_value("UncachedCompile") is None


def test_sync_and_wait(dev):
    y = torch.ones(3, device=dev) * 4
    torch_xla.sync()
    xm.wait_device_ops()
    assert y.cpu().tolist() == [4.0, 4.0, 4.0]


def test_backends_mat_mul_precision(caplog):
    import logging
    import torch_xla.backends as backends
    old = backends.get_mat_mul_precision()
    try:
        with caplog.at_level(logging.WARNING, logger=backends.logger.name):
            backends.set_mat_mul_precision("highest")
        assert backends.get_mat_mul_precision() == "highest"
        assert backends._WARNING_MESSAGE in caplog.text
        with pytest.raises(ValueError, match="Invalid mat mul precision"):
            backends.set_mat_mul_precision("BAD VALUE")
    finally:
        backends.set_mat_mul_precision(old)


def test_placeholder_tensors_trace_but_never_run():
    import torch_xla.debug.metrics as met
    from torch_xla.core.xla_builder import create_placeholder_tensor
    met.clear_all()
    p1 = create_placeholder_tensor((2, 3), torch.bfloat16)
    p2 = create_placeholder_tensor((3, 4), torch.bfloat16)
    assert p1.device == torch_xla.device() and p1.dtype == torch.bfloat16 and p1.shape == (2, 3)
    assert torch_xla._XLAC._is_placecholder(p1)
    assert not torch_xla._XLAC._is_placecholder(torch.ones(1, device=torch_xla.device()))
    h1, h2 = torch_xla._XLAC._get_tensors_handle([p1, p2])
    assert h1 != h2
    b = (torch.sin(p1) @ p2) @ p2.T
    ir = torch_xla._XLAC._get_xla_tensors_text([b])
    assert ir.count("xla::device_data()") == 2   # p2 used twice: still one parameter
    assert "bf16[2,3]{1,0} xla::device_data()" in ir and "bf16[3,4]{1,0} xla::device_data()" in ir
    assert not met.metric_data("TransferToDeviceTime")   # tracing moved nothing to the device
    with pytest.raises(RuntimeError, match="placeholder tensor .* has no data"):
        b.cpu()
    with pytest.raises(RuntimeError, match="placeholder tensor .* has no data"):
        p1.cpu()   # reading the placeholder itself, not only a graph over it
