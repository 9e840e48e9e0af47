"""Metrics and counters: upstream's names, values and text format."""
import os
import re
import subprocess
import sys
import textwrap

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.engine.base import metrics as em

# the expressions upstream's torch_xla/debug/metrics_compare_utils.py parses reports with
METRIC_RE = r'Metric: (\S+)\s+TotalSamples: (\d+)\s+Accumulator: (\S+)'
COUNTER_RE = r'Counter: (\S+)\s+Value: (\d+)'
TIME_RE = (r'((?P<days>\d+)d)?((?P<hours>\d+)h)?((?P<minutes>\d+)m)?((?P<seconds>\d+)s)?'
           r'((?P<milliseconds>\d+)ms)?((?P<microseconds>[\d.]+)us)?')
BYTES_RE = (r'((?P<petabytes>[\d.]+)PB)?((?P<terabytes>[\d.]+)TB)?((?P<gigabytes>[\d.]+)GB)?'
            r'((?P<megabytes>[\d.]+)MB)?((?P<kilobytes>[\d.]+)KB)?((?P<bytes>[\d.]+)B)?')


def _seconds(text):
    m = re.fullmatch(TIME_RE, text)
    assert m and any(m.groups()), text
    g = {k: float(v or 0) for k, v in m.groupdict().items()}
    return (g["days"] * 86400 + g["hours"] * 3600 + g["minutes"] * 60 + g["seconds"]
            + g["milliseconds"] * 1e-3 + g["microseconds"] * 1e-6)


def test_time_and_bytes_format():
    assert em.format_time(317_794_578) == "317ms794.578us"
    assert em.format_time(2_042_010_001) == "02s042ms010.001us"
    assert em.format_time(512) == "000.512us"
    assert em.format_time(61e9) == "01m01s000ms000.000us"
    assert abs(_seconds(em.format_time(317_794_578)) - 0.317794578) < 1e-9
    assert em.format_bytes(1536) == "1.50KB"
    assert em.format_bytes(10) == "10.00B"
    assert em.format_number(3) == "3.00"


def test_known_program_counts_exactly(dev):
    a = torch.randn(7, 13).to(dev)            # one upload
    outs = []
    for i in range(3):
        b = a * 2.71828 + 1                    # the same graph each step: 1 compile, 3 executions
        xm.mark_step()
        outs.append(b.cpu())                   # three reads
    assert torch.allclose(outs[0], outs[2])
    report = met.metrics_report()
    metrics = {m[0]: m for m in re.findall(METRIC_RE, report)}
    counters = {c[0]: int(c[1]) for c in re.findall(COUNTER_RE, report)}
    # every block parses
    assert len(metrics) == report.count("Metric: ")
    assert len(counters) == report.count("Counter: ")
    assert counters["UncachedCompile"] == 1
    assert counters["CachedCompile"] == 2
    assert counters["MarkStep"] == 3
    assert counters["xla::mul"] == 3 and counters["xla::add"] == 3
    assert int(metrics["CompileTime"][1]) == 1
    assert int(metrics["ExecuteTime"][1]) == 3
    # the tensor, and the scalar 2.71828 once (a value no earlier test used): later steps reuse its device copy
    assert int(metrics["TransferToDeviceTime"][1]) == 2
    assert int(metrics["TransferFromDeviceTime"][1]) == 3
    # upstream's names: OutboundData leaves the host for the device, InboundData comes back
    assert int(metrics["OutboundData"][1]) == 2, metrics["OutboundData"]
    # 7*13*4 + the scalar pool (4 bytes: a float beside an f32 tensor is fed as f32)
    assert metrics["OutboundData"][2] == "368.00B", metrics["OutboundData"]
    assert metrics["InboundData"][2] == f"{3 * 364}.00B" or metrics["InboundData"][2] == "1.07KB"
    assert _seconds(metrics["CompileTime"][2]) > 0
    # the API agrees with the report
    assert met.counter_value("CachedCompile") == 2
    total, acc, samples = met.metric_data("ExecuteTime")
    assert total == 3 and len(samples) == 3 and abs(sum(v for _, v in samples) - acc) < 1e-3
    assert "CompileTime" in met.metric_names() and "MarkStep" in met.counter_names()


def test_report_layout_sorted_and_nonzero(dev):
    a = torch.randn(5, 3).to(dev)
    (a + 1).cpu()
    report = met.metrics_report()
    names = re.findall(r"^Metric: (\S+)$", report, re.M)
    cnames = re.findall(r"^Counter: (\S+)$", report, re.M)
    assert names == sorted(names) and cnames == sorted(cnames)
    assert report.index("Metric: ") < report.index("Counter: ")
    for block in report.split("Metric: ")[1:]:
        lines = block.split("Counter: ")[0].strip().splitlines()
        assert lines[1].startswith("  TotalSamples: ") and lines[2].startswith("  Accumulator: ")
        assert lines[-1].startswith("  Percentiles: 1%=")
    met.clear_counters()
    assert met.counter_value("UncachedCompile") is None
    assert "Counter: " not in met.metrics_report()
    assert met.counter_value("NoSuchCounter") is None
    met.clear_all()
    assert met.metrics_report() == ""
    assert met.metric_data("CompileTime") is None


def test_short_report_and_fallbacks(dev):
    a = torch.randn(3, 7).to(dev)
    xm.mark_step()
    # a graph no other test builds, so it compiles here whatever ran before in this process
    v = (a * 3).cumsum(1).amax().item()         # host read: aten::_local_scalar_dense
    assert isinstance(v, float)
    short = met.short_metrics_report()
    assert "Metric: CompileTime" in short and "Counter: MarkStep" in short
    assert "Counter: aten::_local_scalar_dense" in short
    assert "InboundData" not in short
    only = met.short_metrics_report(["MarkStep"], ["ExecuteTime"])
    assert only.startswith("Metric: ExecuteTime") and "CompileTime" not in only
    assert "aten::_local_scalar_dense" in met.executed_fallback_ops()
    assert torch_xla._XLAC._xla_counter_value("MarkStep") == 1


def test_value_metrics_and_tensor_counters(dev):
    a = torch.randn(3, 9).to(dev)
    b = (a + 1) * a
    xm.mark_step()
    del b
    assert met.metric_data("TensorsGraphSize")[1] >= 2
    assert met.counter_value("CreateXlaTensor") >= 2
    assert "InputOutputAliasCount" in met.metric_names()


def _run(code, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("JAX_PLATFORMS", "cpu")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_metrics_file_and_percentiles(tmp_path):
    f = tmp_path / "metrics.txt"
    p = _run("""
        import torch, torch_xla, torch_xla.core.xla_model as xm, torch_xla.debug.metrics as met
        a = torch.randn(2, 2).to(torch_xla.device())
        for _ in range(2):
            a = a + 1
            xm.mark_step()
        print(met.metrics_report())
    """, {"XLA_METRICS_FILE": str(f), "XLA_METRICS_PERCENTILES": "0.5:0.9"})
    text = f.read_text()
    assert "[MetricsData; step=0]" in text and "[MetricsData; step=1]" in text
    assert "Counter: MarkStep\n  Value: 2" in text
    assert "  Percentiles: 50%=" in p.stdout and "; 90%=" in p.stdout and "1%=" not in p.stdout


def test_scalar_only_uploads_are_counted_as_transfers():
    """A step whose only host data are Python scalars still reports its upload
    (upstream uploads scalars as device data and counts them)."""
    dev = torch_xla.device()
    # values no other test uses: a recent pool's device copy is reused, whichever test made it
    x = torch.zeros(3, device=dev)          # made on the device: no upload
    xm.mark_step()
    met.clear_all()
    y = x + 13.0625
    xm.mark_step()
    data = met.metric_data("TransferToDeviceTime")
    assert data is not None and data[0] == 1, data
    assert met.metric_data("OutboundData")[1] > 0
    assert "Metric: TransferToDeviceTime" in met.metrics_report()
    assert y.cpu().tolist() == [13.0625] * 3
    z = x + 13.0625                              # the same scalar again: its device copy is reused
    xm.mark_step()
    assert met.metric_data("TransferToDeviceTime")[0] == 1
    w = x + 17.0625                              # a new value is uploaded
    xm.mark_step()
    assert met.metric_data("TransferToDeviceTime")[0] == 2
    assert z.cpu().tolist() == [13.0625] * 3 and w.cpu().tolist() == [17.0625] * 3


def test_increment_counter_from_python():
    # upstream's _XLAC._xla_increment_counter: adds to a counter, making it if needed
    met.clear_counters()
    torch_xla._XLAC._xla_increment_counter("UncachedCompile", 3)
    torch_xla._XLAC._xla_increment_counter("SomeNewCounter", 2)
    torch_xla._XLAC._xla_increment_counter("SomeNewCounter", 1)
    assert met.counter_value("UncachedCompile") == 3
    assert met.counter_value("SomeNewCounter") == 3
    met.clear_counters()
    assert met.counter_value("SomeNewCounter") is None


def test_runtime_stage_metrics_and_counters_upstream_reports(dev):
    # the stages of a barrier under upstream's names: a CPU tensor made device
    # data, inputs gathered, the device lock, outputs wrapped, a compile handle,
    # a scalar upload that missed the device-data cache
    met.clear_all()
    t = torch.tensor(2077.0, device=dev)
    assert met.counter_value("CreateXlaTensor") == 1   # counted when read, before any barrier
    assert met.metric_data("TensorToData")[0] == 1
    u = t * 3.25 + 0.125
    xm.mark_step()
    assert u.cpu().item() == 2077.0 * 3.25 + 0.125
    for name in ("UnwrapXlaData", "WrapXlaData", "DeviceLockWait", "TensorToData"):
        assert met.metric_data(name)[0] >= 1, name
    assert met.counter_value("CreateCompileHandles") == met.counter_value("UncachedCompile") >= 1
    assert met.counter_value("DeviceDataCacheMiss") >= 1
    met.clear_counters()
    assert "CreateXlaTensor" not in met.counter_names()


def test_execute_time_is_the_run_not_its_launch(dev):
    # a launch returns once the work is queued; the sample is counted then and
    # becomes the run's whole time once the run is seen finished
    import time
    a = torch.randn(700, 700, device=dev)
    torch_xla.sync()
    a.cpu()
    met.clear_all()
    for _ in range(12):
        a = torch.tanh(a @ a / 700)
    s = a.sum()
    torch_xla.sync()
    assert met.metric_data("ExecuteTime")[0] == 1
    t0 = time.perf_counter_ns()
    s.item()
    waited = time.perf_counter_ns() - t0
    assert waited > 2e6, "the run should still be going when the launch returns"
    total, acc, samples = met.metric_data("ExecuteTime")
    assert total == 1 and acc >= 0.9 * waited and samples[-1][1] == acc


def test_execute_time_counts_runs_whose_outputs_were_donated(dev):
    # every output of one step becomes the next step's donated input
    w = torch.randn(300, 300, device=dev)
    torch_xla.sync()
    met.clear_all()
    for _ in range(5):
        w.mul_(0.5).add_(1)
        torch_xla.sync()
    w.cpu()
    total, acc, samples = met.metric_data("ExecuteTime")
    assert total == 5 and len(samples) == 5 and acc == sum(v for _, v in samples)
