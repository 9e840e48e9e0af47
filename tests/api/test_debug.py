"""PT_XLA_DEBUG_LEVEL analysis, recompilation explanations, graph dumps, sanity command."""
import os
import re
import subprocess
import sys
import textwrap

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def _run(code, env=None, timeout=150, path=None):
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("JAX_PLATFORMS", "cpu")
    if path is not None:
        path.write_text(textwrap.dedent(code))
        args = [sys.executable, str(path)]
    else:
        args = [sys.executable, "-c", textwrap.dedent(code)]
    p = subprocess.run(args, env=e, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-4000:]
    return p


TRAIN = """
import torch, torch_xla, torch_xla.core.xla_model as xm
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Linear(8, 2).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    bs = {bs}
    x = torch.randn(bs, 8).to(dev)
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    print("loss", loss.item())  # LOSS_ITEM_LINE
    xm.mark_step()
"""


def _line_of(code, marker):
    for i, line in enumerate(textwrap.dedent(code).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


def test_debug_level_2_item_every_step_and_recompilation(tmp_path):
    code = TRAIN.format(steps=5, bs="4 if step < 3 else 6")
    script = tmp_path / "train_item.py"
    p = _run(code, {"PT_XLA_DEBUG_LEVEL": "2"}, path=script)
    err = p.stderr
    line = _line_of(code, "LOSS_ITEM_LINE")
    assert "Compilation Analysis: Compilation Cause" in err
    assert "Compilation Analysis:   most likely user code trying to access tensor value before mark_step" in err
    assert "Execution Analysis: Execution Cause" in err
    assert f"Execution Analysis:   <module> ({script}:{line})" in err
    assert re.search(r"Compilation Analysis:   Graph Hash: [0-9a-f]{32}", err)
    assert re.search(r"Compilation Analysis:   Number of Graph Inputs: \d+", err)
    assert re.search(r"Compilation Analysis:   Number of Graph Outputs: \d+", err)
    assert "Post Compilation Analysis: Graph input size: " in err
    assert "Compilation Analysis:   user mark_step" in err       # the mark_step after the read
    assert re.search(r"pt-xla-profiler: TransferFromDeviceTime too frequent: \d+ counts during \d+ steps",
                     p.stdout)
    # the batch grows from 4 to 6 at step 3: say which input changed, and both shapes
    assert "Recompilation Analysis: " in err
    assert re.search(r"Recompilation Analysis:   input \d+ 'x' shape changed: f32\[4,8\] -> f32\[6,8\]", err), \
        err[-3000:]
    assert "first used by aten::" in err


def test_debug_level_1_skips_execution_and_debug_file(tmp_path):
    log = tmp_path / "debug.txt"
    p = _run(TRAIN.format(steps=2, bs="4"), {"PT_XLA_DEBUG_LEVEL": "1", "PT_XLA_DEBUG_FILE": str(log)})
    text = log.read_text()
    assert "Compilation Analysis: Compilation Cause" in text
    assert "Execution Analysis: Execution Cause" not in text
    assert "Compilation Analysis" not in p.stderr


def test_explain_recompilations_function(dev):
    def step(n):
        x = torch.ones(n, 3, device=dev) * 2
        y = x.sum(0) + 1
        xm.mark_step()
        return y
    step(3)
    step(3)
    step(5)
    text = met.explain_recompilations(last=1)
    assert "f32[3,3] -> f32[5,3]" in text or "op " in text, text
    assert "test_debug.py" in text


def test_recompilation_names_keep_no_tensor_of_yours_alive(dev):
    # naming a recompiled graph's inputs reads this frame's locals; an earlier
    # iteration's tensors must still die when the loop replaces them (kept alive,
    # their pending writes joined the next barrier's graph and made it a new one)
    import weakref
    seen = []
    for n in (3, 4, 4):   # the second step is explained, the third one is cached
        x = torch.arange(n, dtype=torch.float32).to(dev)
        y = x * 2
        y.add_(1)
        xm.mark_step()
        seen.append(weakref.ref(y))
    assert "input 0 'x' shape changed" in met.explain_recompilations(last=1)
    assert [r() is None for r in seen] == [True, True, False]


def test_reading_a_frames_locals_leaves_yours_intact():
    from torch_xla.engine.base import frames
    x = [1]
    held = locals()   # a user's own snapshot is kept as it is
    names = dict(frames.local_items(sys._getframe()))
    assert names["x"] is x and held["x"] is x


def test_graph_dumps(dev):
    a = torch.randn(2, 3).to(dev)
    b = (a * 2).sum(dim=1)
    text = torch_xla._XLAC._get_xla_tensors_text([b])
    assert text.startswith("IR {\n") and text.rstrip().endswith("}")
    assert re.search(r"%\d+ = f32\[2,3\]\{1,0\} xla::device_data\(\), xla_shape=f32\[2,3\]\{1,0\}", text)
    assert re.search(r"%\d+ = f32\[2\]\{0\} aten::sum\(%\d+\), .*ROOT=0", text)
    dot = torch_xla._XLAC._get_xla_tensors_dot([b])
    assert dot.startswith("digraph G {") and "->" in dot
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([b])
    assert hlo.startswith("HloModule") and "reduce" in hlo
    # upstream's spelling: instructions named after their opcode, parameters p<n>,
    # each operand printed with its shape
    assert "%p0.1 = f32[2,3]{1,0} parameter(0)" in hlo, hlo
    assert re.search(r"%multiply\.1 = f32\[2,3\]\{1,0\} multiply\(f32\[2,3\]\{1,0\} %p0\.1, ", hlo), hlo
    shlo = xm.get_stablehlo([b])
    assert "stablehlo." in shlo and "func.func" in shlo
    bc = xm.get_stablehlo_bytecode([b])
    assert isinstance(bc, bytes) and bc[:4] == b"ML\xefR"
    # dumping runs nothing
    assert met.counter_value("UncachedCompile") is None
    assert torch.allclose(b.cpu(), (a.cpu() * 2).sum(1))


def test_save_tensors_file_formats(tmp_path):
    code = f"""
        import os, torch, torch_xla, torch_xla.core.xla_model as xm
        a = torch.randn(2, 2).to(torch_xla.device())
        for fmt in ("text", "hlo", "dot", "stablehlo"):
            os.environ["XLA_SAVE_TENSORS_FMT"] = fmt
            os.environ["XLA_SAVE_TENSORS_FILE"] = os.path.join({str(tmp_path)!r}, "graphs_" + fmt + ".txt")
            b = a @ a + 1
            xm.mark_step()
            print(b.sum().item())
    """
    dump = tmp_path / "dump"
    _run(code, {"XLA_SAVE_TENSORS_FILE": str(tmp_path / "unused.txt"), "XLA_IR_DEBUG": "1",
                "XLA_FLAGS": f"--xla_dump_to={dump}"})
    assert any(n.endswith(".txt") for n in os.listdir(dump))    # XLA_FLAGS reach XLA
    for fmt, marker in (("text", "IR {"), ("hlo", "HloModule"), ("dot", "digraph G"), ("stablehlo", "stablehlo.")):
        text = (tmp_path / f"graphs_{fmt}.txt.0").read_text()   # upstream appends the device ordinal
        assert text.count("[SyncTensorsGraph]") == 2, text[:500]
        assert "TensorsGraphInfo:" in text and "## BEGIN_GRAPH" in text and "## END_GRAPH" in text
        assert re.search(r"Graph Hash: [0-9a-f]{32}", text)
        assert marker in text
        assert "mark_step (" in text
        if fmt == "text":
            assert "location=<module>@<string>:7" in text, text


def test_save_tensors_file_names_dynamo_runs(tmp_path):
    # every run of a torch.compile(backend="openxla") graph is a "[dynamo]" record,
    # laid out as upstream's (one more blank line after END_GRAPH)
    code = """
        import torch, torch_xla
        f = torch.compile(lambda x, y: torch.cos(x) + torch.sin(y), backend="openxla")
        d = torch_xla.device()
        x, y = torch.tensor(1.0, device=d), torch.tensor(2.0, device=d)
        for _ in range(2):
            print(f(x, y).item())
    """
    out = tmp_path / "g.txt"
    _run(code, {"XLA_SAVE_TENSORS_FILE": str(out), "XLA_SAVE_TENSORS_FMT": "text"})
    text = (tmp_path / "g.txt.0").read_text()
    assert text.count("[dynamo]") == 2, text[:800]
    lines = text.splitlines(keepends=True)
    assert lines[-5].startswith("Graph Hash:") and lines[-3] == "## END_GRAPH\n"


def test_save_hlo_file_on_failure(tmp_path, dev, monkeypatch):
    from torch_xla.engine.observe import graph_dump
    a = torch.randn(3, 3).to(dev)
    b = a + 1
    f = tmp_path / "failed.hlo"
    monkeypatch.setenv("XLA_SAVE_HLO_FILE", str(f))
    path = graph_dump.save_failing_hlo([b._lazy.value], "compile", RuntimeError("boom"))
    assert path == str(f)
    text = f.read_text()
    assert "failed to compile: RuntimeError: boom" in text and "HloModule" in text


def test_sanity_command():
    p = subprocess.run([sys.executable, "-m", "torch_xla.utils.sanity"], capture_output=True, text=True,
                       timeout=150, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "torch " in out and "jax " in out and "torch_xla " in out
    assert "simple calculation" in out and "tiny training step" in out
    assert "torch_xla is working." in out


def test_sanity_reports_failures(capsys):
    from torch_xla.utils import sanity
    sanity._failures.clear()
    assert sanity._check("a check that breaks", lambda: 1 / 0, "a hint") is False
    assert sanity._finish() == 1
    out = capsys.readouterr().out
    assert "[FAIL] a check that breaks: ZeroDivisionError" in out and "a hint" in out
    assert "NOT working" in out
    sanity._failures.clear()


def test_save_hlo_file_on_a_failing_compile(tmp_path, dev, monkeypatch):
    import pytest
    from torch_xla.engine.ir.graph import Graph
    f = tmp_path / "bad.hlo"
    monkeypatch.setenv("XLA_SAVE_HLO_FILE", str(f))
    build = Graph.build_fn

    def broken(self, ctx=None):
        build(self, ctx)

        def bad(*xs):
            raise ValueError("lowering exploded")
        return bad

    monkeypatch.setattr(Graph, "build_fn", broken)
    a = torch.randn(3, 5).to(dev)
    b = a.exp()
    with pytest.raises(ValueError, match="lowering exploded") as ei:
        b.cpu()
    assert any("XLA_SAVE_HLO_FILE" in n for n in getattr(ei.value, "__notes__", []))
    text = f.read_text()
    assert "graph failed to compile: ValueError: lowering exploded" in text
    assert "aten::exp" in text          # lowering failed too, so the IR is kept instead


def test_a_large_graph_warns_once_with_the_user_line(dev):
    import warnings
    from torch_xla.engine.base import config
    x = torch.ones(4, device=dev)
    with config.override(XLA_GRAPH_SIZE_WARNING=50), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            for _ in range(60 + 10 * step):   # "forgot mark_step"; a new graph each time
                x = x * 1.01 + 0.5
            xm.mark_step()
    msgs = [str(w.message) for w in caught if "torch_xla: compiling a graph of" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "test_debug.py" in msgs[0] and "xm.mark_step()" in msgs[0]


def test_tensor_shape_type_names_the_device_element_type():
    import torch_xla
    dev = torch_xla.device()
    half = torch.rand(10, dtype=torch.half).to(dev)
    out = half.mul_(torch.tensor(7, dtype=torch.double).to(dev))   # in place keeps f16
    assert torch_xla._XLAC._get_xla_tensor_shape_type(out) == "f16"
    assert torch_xla._XLAC._get_xla_tensor_shape_type(torch.ones(2, dtype=torch.bool, device=dev)) == "pred"
    assert torch_xla._XLAC._get_xla_tensor_shape_type(torch.ones(2, dtype=torch.int64, device=dev)) == "s64"


def test_real_devices_name_the_platform():
    import re
    import torch_xla
    import torch_xla.core.xla_model as xm
    for name in torch_xla._XLAC._xla_real_devices(xm.get_xla_supported_devices()):
        assert re.fullmatch(r"[A-Z]+:\d+", name), name


# -- upstream's TF_CPP_VMODULE troubleshooting switches -------------------------

def test_tf_cpp_vmodule_logs_each_graph_execution_compile_and_transfer():
    code = TRAIN.format(steps=3, bs=4)
    env = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "xla_graph_executor=5,pjrt_computation_client=3"}
    err = _run(code, env=env).stderr
    execs = re.findall(r"xla_graph_executor\.cpp\] Executing IR graph hash ([0-9a-f]{32}) on device CPU:0",
                       err)
    compiles = re.findall(r"xla_graph_executor\.cpp\] Compiling IR graph hash ([0-9a-f]{32}) .* done!", err)
    assert len(execs) >= 3, err[-3000:]                 # one line per step's graph at least
    assert compiles and set(compiles) <= set(execs)     # what compiled is what ran
    assert "Cached computation (hash: " in err            # level 5: cache hits of later steps
    assert re.search(r"TensorsGraphSize=\d+", err)
    assert re.search(r"pjrt_computation_client\.cpp\] Transfer to CPU:0: float32\[4, 8\], 128 bytes", err)
    assert "pjrt_computation_client.cpp] Returning " in err


def test_tf_cpp_vmodule_levels_and_min_log_level():
    code = TRAIN.format(steps=2, bs=4)
    # level 3 of the executor: compiles and executions, no level-5 lines, no transfers
    err = _run(code, env={"TF_CPP_VMODULE": "xla_graph_executor=3"}).stderr
    assert "Executing IR graph hash" in err and "TensorsGraphSize" not in err and "Transfer to" not in err
    # the user's TF_CPP_MIN_LOG_LEVEL=1 silences INFO lines, as upstream's logging does
    err = _run(code, env={"TF_CPP_MIN_LOG_LEVEL": "1", "TF_CPP_VMODULE": "xla_graph_executor=5"}).stderr
    assert "xla_graph_executor.cpp]" not in err


def test_vmodule_parsing():
    from torch_xla.engine.observe import vlog
    assert vlog.parse("xla_graph_executor=5,pjrt_computation_client=3") == {
        "xla_graph_executor": 5, "pjrt_computation_client": 3}
    assert vlog.parse("xla_*=2", max_level=1) == {"xla_graph_executor": 2, "pjrt_computation_client": 1}
    assert vlog.parse("other=4") == {}
    import pytest
    with pytest.raises(ValueError, match="TF_CPP_VMODULE"):
        vlog.parse("xla_graph_executor=five")
