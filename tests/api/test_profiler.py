"""torch_xla.debug.profiler: traces TensorBoard's profile plugin reads, with the Trace names."""
import glob
import os
import socket

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp


def _xplanes(logdir):
    return glob.glob(os.path.join(str(logdir), "plugins", "profile", "*", "*.xplane.pb"))


def test_start_stop_trace_three_steps(tmp_path, dev):
    w = torch.randn(16, 16).to(dev)

    @xp.trace_me("decorated_helper_fn")
    def helper(t):
        return t * 2

    xp.start_trace(str(tmp_path))
    for step in range(3):
        with xp.StepTrace("train_step_region", step_num=step):
            with xp.Trace("forward_region_name"):
                y = helper(w @ w).sum()
    assert xp.get_tracer_marked_step()
    loss = y.item()
    xp.stop_trace()
    assert isinstance(loss, float)
    # StepTrace synced each step: one graph, compiled once, run three times
    assert met.counter_value("MarkStep") == 3
    assert met.metric_data("ExecuteTime")[0] == 3
    files = _xplanes(tmp_path)
    assert len(files) == 1, files
    data = open(files[0], "rb").read()
    for name in (b"train_step_region", b"forward_region_name", b"decorated_helper_fn"):
        assert name in data, name


def test_server_and_local_trace(tmp_path, dev):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = xp.start_server(port)
    assert server is not None
    t = xp.trace_detached(f"localhost:{port}", str(tmp_path), duration_ms=600)
    a = torch.randn(8, 8).to(dev)
    while t.is_alive():
        with xp.Trace("work_during_capture"):
            (a @ a).sum().item()
    t.join()
    files = _xplanes(tmp_path)
    assert files and b"work_during_capture" in open(files[0], "rb").read()


def test_step_trace_replaces_the_loaders_sync(dev):
    import torch_xla.distributed.parallel_loader as pl
    ds = torch.utils.data.TensorDataset(torch.arange(12, dtype=torch.float32).reshape(6, 2))
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(ds, batch_size=2), dev)
    w = torch.ones(2, device=dev)
    xp.set_tracer_marked_step(False)
    for step, (x,) in enumerate(loader):
        with xp.StepTrace("loader_step", step_num=step):
            w = w + x.sum(0)
    # three StepTrace syncs and the loader's two at the end of the data; no per-batch loader syncs
    assert met.counter_value("MarkStep") == 5
    assert w.cpu().tolist() == [31.0, 37.0]


def test_runtime_regions_carry_upstreams_names(tmp_path, dev):
    # uploads, compiles, launches and host reads appear in a trace under the
    # names upstream's runtime gives them
    xp.start_trace(str(tmp_path))
    x = torch.ones(5).to(dev)
    (x + x * 3).cpu()
    xp.stop_trace()
    data = open(_xplanes(tmp_path)[0], "rb").read()
    for name in ("TransferToDevice", "Compile", "ExecuteComputation", "TransferFromDevice"):
        assert f"PjRtComputationClient::{name}".encode() in data, name


def test_a_step_marker_inside_a_trace_region_is_refused_as_upstream():
    import pytest
    import torch_xla
    import torch_xla.debug.profiler as xp
    torch_xla.sync()   # numbering starts after a step marker
    with pytest.raises(RuntimeError, match=r"Expecting scope to be empty but it is conv1\.1"):
        with xp.Trace("conv1"):
            torch_xla.sync()
    with xp.StepTrace("train_step", step_num=0):   # ends the step after closing its scope
        pass
    torch_xla.sync()   # nothing left open


def test_ir_debug_records_the_trace_scope_and_frames_in_the_tensors_report():
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import torch, torch_xla, torch_xla.debug.profiler as xp
        with xp.Trace("block"):
            t = torch.tensor([2.0, 3.0], device="xla") * 2.5
        report = torch_xla._XLAC._xla_tensors_report(0, "xla:0")
        assert "Frames" in report and "scope=block.1" in report, report
        assert "aten::mul" in report
        print("ok")
    """)
    import os
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XLA_IR_DEBUG": "1", "JAX_PLATFORMS": "cpu"})
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
