"""Upstream torch_xla 2.9's public names exist here with compatible signatures, and the
helpers libraries call (Lightning, accelerate, transformers) behave as upstream's."""
import importlib
import inspect
import io
import os
import pathlib
import re
import contextlib

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

API = pathlib.Path(__file__).with_name("upstream_api_2.9.txt")


def _rows():
    for line in API.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            parts = line.split()
            yield parts[0], parts[1], parts[2], (parts[3].split(",") if len(parts) > 3 else [])


def _params(fn):
    """Our parameter names in upstream's notation ('*' before keyword-only, '*a', '**k')."""
    out, kwonly = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.append("*" + p.name)
            kwonly = True
        elif p.kind == p.VAR_KEYWORD:
            out.append("**" + p.name)
        else:
            if p.kind == p.KEYWORD_ONLY and not kwonly:
                out.append("*")
                kwonly = True
            out.append(p.name)
    return out, inspect.signature(fn).parameters


def _compatible(want, fn):
    """Upstream's parameters are ours, in order; anything we add after them has a default
    (or is *args/**kwargs); an upstream (*args, **kwargs) pass-through accepts anything."""
    if want in (["*args", "**kwargs"],):
        return True
    got, params = _params(fn)
    if got[:len(want)] != want:
        return False
    extra = [p for p in list(params.values())[len([w for w in want if w != "*"]):]]
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in extra)


ROWS = list(_rows())


def test_api_list_is_substantial():
    assert len(ROWS) > 190
    assert {m for m, *_ in ROWS} >= {"torch_xla", "torch_xla.core.xla_model", "torch_xla.runtime",
                                     "torch_xla.utils.utils", "torch_xla.experimental.pjrt"}


@pytest.mark.parametrize("module,name,kind,want", ROWS, ids=[f"{m}.{n}" for m, n, _, _ in ROWS])
def test_upstream_name(module, name, kind, want):
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.{name} is missing"
    obj = getattr(mod, name)
    if kind == "class":
        assert inspect.isclass(obj) or callable(obj)
    elif kind == "def":
        assert callable(obj)
        assert _compatible(want, obj), f"{module}.{name}{inspect.signature(obj)} vs upstream ({', '.join(want)})"


# -- behaviour of the helpers libraries call ---------------------------------------------

def test_print_training_update_format(capsys):
    import torch_xla.test.test_utils as tu
    tu.print_training_update(torch_xla.device(), 7, 0.123456, 10.0, 12.345, epoch=2)
    tu.print_test_update(torch_xla.device(), 98.765, epoch=2)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"\| Training Device=xla:0/0 Epoch=2 Step=7 Loss=0\.12346 Rate=10\.00 "
                        r"GlobalRate=12\.35 Time=\d\d:\d\d:\d\d", out[0]), out[0]
    assert re.fullmatch(r"\| Test Device=xla:0/0 Epoch=2 Accuracy=98\.77 Time=\d\d:\d\d:\d\d", out[1]), out[1]


def test_data_movement_helpers():
    dev = torch_xla.device()
    data = {"a": torch.arange(4.0), "b": [torch.ones(2, dtype=torch.int64), "text", 3]}
    moved = xm.send_cpu_data_to_device(data, dev)
    assert moved["a"].device.type == "xla" and moved["b"][0].device.type == "xla"
    assert moved["b"][1:] == ["text", 3]
    single = xm.send_cpu_data_to_device(torch.zeros(3), dev)
    assert isinstance(single, list) and single[0].device.type == "xla"
    back = xm._maybe_convert_to_cpu({"x": moved["a"] * 2, "y": (moved["b"][0],)})
    assert back["x"].device.type == "cpu" and torch.equal(back["x"], torch.arange(4.0) * 2)
    assert isinstance(back["y"], tuple) and torch.equal(back["y"][0], torch.ones(2, dtype=torch.int64))
    kept = xm._maybe_convert_to_cpu([moved["a"] + 1], convert=False)
    assert kept[0].device.type == "xla"


def test_replication_and_device_helpers(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")  # set_replication may set it; undone after the test
    dev = torch_xla.device()
    xm.set_replication(dev, xm.get_xla_supported_devices())  # accelerate's call
    xm.set_replication(dev, [])
    with pytest.raises(RuntimeError, match="number of devices"):
        xm.set_replication(dev, ["xla:0", "xla:0", "xla:0"])
    assert xm.xla_replication_devices([dev]) == [f"{xr.device_type()}:0"]
    assert isinstance(xm.xla_device_kind(), str) and xm.xla_device_kind()
    attrs = xr.runtime_device_attributes(str(dev))
    assert attrs["id"] == 0 and "device_kind" in attrs
    assert xr.global_runtime_device_attributes()[0]["name"] == attrs["name"]
    assert xr.is_bf16_supported() is True
    assert xr.get_num_cached_compilation_graph() >= 0
    assert xm.xla_rendezvous(b"hi") == [b"hi"]
    with pytest.raises(TypeError):
        xm.xla_rendezvous("not bytes")


def test_fetch_gradients_and_bucketized_allreduce_single_process():
    dev = torch_xla.device()
    model = torch.nn.Linear(3, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(4, 3, device=dev)).sum().backward()
    grads = xm._fetch_gradients(opt)
    assert len(grads) == 2 and all(g.device.type == "xla" for g in grads)
    ref = [g.cpu().clone() for g in grads]
    xm.all_reduce_bucketized_gradients(grads, scale=1.0, groups=None, pin_layout=False)
    assert all(torch.allclose(g.cpu(), r) for g, r in zip(grads, ref))
    xm.unlazy(grads)


def test_fork_rng_restores_device_generator():
    dev = torch_xla.device()
    xm.set_rng_state(123)
    with xm.fork_rng():
        a = torch.rand(5, device=dev).cpu()
    b = torch.rand(5, device=dev).cpu()
    assert torch.equal(a, b)


def test_check_view_sharing():
    dev = torch_xla.device()
    base = torch.arange(6.0, device=dev)
    xm.check_view_sharing({"a": base, "b": torch.ones(2, device=dev)})
    with pytest.raises(RuntimeError, match="sharing a view"):
        xm.check_view_sharing([base[:3], base[3:]])
    cpu = torch.arange(4.0)
    with pytest.raises(RuntimeError, match="sharing a view"):
        xm.check_view_sharing([cpu, cpu[1:]])


def test_utils_utils_helpers(tmp_path):
    import torch_xla.utils.utils as xu
    nested = {"x": [1, (2, "s")], "y": 3}
    seen = []
    xu.for_each_instance(nested, lambda v: isinstance(v, int), seen.append)
    assert sorted(seen) == [1, 2, 3]
    doubled = xu.for_each_instance_rewrite(nested, lambda v: isinstance(v, int), lambda v: v * 2)
    assert doubled == {"x": [2, (4, "s")], "y": 6} and nested["y"] == 3
    assert xu.as_list(3) == [3] and xu.as_list((1,)) == (1,)
    assert xu.flatten_nested_tuple((1, (2, (3,)), 4)) == (1, 2, 3, 4)
    assert xu.list_copy_append([1], 2) == [1, 2]
    os.environ["ECO_TEST_FLAG"] = "1"
    try:
        assert xu.check_env_flag("ECO_TEST_FLAG") and xu.getenv_as("ECO_TEST_FLAG", int) == 1
    finally:
        del os.environ["ECO_TEST_FLAG"]
    assert xu.getenv_as("ECO_TEST_UNSET", int, 5) == 5
    assert xu.parallel_work(2, lambda a, b: a + b, [1, 2], [10, 20]) == [11, 22]
    assert xu.LazyProperty(lambda: 42).value == 42
    assert len(list(xu.FnDataGenerator(lambda x: x * 2, 4, dims=[3], count=2))) == 2
    assert xu.shape([torch.zeros(2, 3), torch.zeros(1)]) == [[2, 3], [1]]
    folder = xu.TmpFolder()
    assert os.path.isdir(folder.name)


def test_keyd_queue_and_tagger():
    from torch_xla.utils import checkpoint_tagger, keyd_queue
    q = keyd_queue.Queue(maxsize=2)
    q.put(1)
    q.put(2)
    q.close_write()
    assert [q.get(), q.get(), q.get()] == [1, 2, None]
    kq = keyd_queue.KeydQueue()
    kq.put("b", 2)
    assert kq.get("b") == 2
    removed = []
    tagger = checkpoint_tagger.CheckpointTagger(remover=removed.append)
    tagger.tag("best", "ckpt1")
    tagger.tag("latest", "ckpt1")
    tagger.tag("latest", "ckpt2")
    tagger.tag("best", "ckpt2")
    assert removed == ["ckpt1"] and tagger.tags == {"best": "ckpt2", "latest": "ckpt2"}
    assert checkpoint_tagger.CheckpointTagger.load_from_json(tagger.save_to_json()).tags == tagger.tags


def test_gradient_checkpoint_matches_plain_backward():
    from torch_xla.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    lin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(3, 4)
    lin(x).sum().backward()
    ref = [p.grad.clone() for p in lin.parameters()]
    dev = torch_xla.device()
    model = lin.to(dev)
    model.zero_grad()
    xd = x.to(dev).requires_grad_(True)
    checkpoint(model, xd).sum().backward()
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad.cpu(), r, rtol=1e-5, atol=1e-5)


def test_metrics_helpers(tmp_path):
    import torch_xla.debug.metrics as met
    from torch_xla.debug import metrics_compare_utils as mcu, metrics_saver
    (torch.ones(2, device=torch_xla.device()) * 3).cpu()
    report = met.metrics_report()
    parsed = mcu.parse_metrics_report(report)
    assert any(k.endswith("__TotalSamples") for k in parsed), list(parsed)[:5]
    points = mcu.get_data_points_from_metrics_reports([report, report])
    assert all(len(v) == 2 for v in points.values())
    # upstream's keys: byte amounts in megabytes (_mb), times in seconds (_sec), no rates
    one = mcu.parse_metrics_report("Metric: In\n  TotalSamples: 3\n  Accumulator: 1.54MB\n  Rate: 2 / second\n"
                                   "  Percentiles: 1%=393.00KB\nMetric: T\n  Accumulator: 01m29s615ms\n"
                                   "Counter: C\n  Value: 40\n")
    assert one == {"In__TotalSamples": 3.0, "In__Accumulator_mb": 1.54, "In__Percentile_1_mb": 0.393,
                   "T__Accumulator_sec": 89.615, "C__Value": 40}
    path = tmp_path / "m.txt"
    metrics_saver.save_metrics(str(path))
    assert "Metric:" in path.read_text() or "Counter:" in path.read_text()


def test_unsupported_names_raise_clearly():
    from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer
    with pytest.raises(ValueError, match="same XLA device"):   # CPU parameters: a clear error
        ZeroRedundancyOptimizer([torch.zeros(1)], torch.optim.SGD, lr=0.1)
    with pytest.raises(NotImplementedError, match="compile option"):
        torch_xla.set_custom_compile_options({"xla_foo": 1})


def test_compile_max_different_graphs():
    dev = torch_xla.device()

    def step(x):
        return (x * 2 + 1).sum()

    f = torch_xla.compile(step, max_different_graphs=1)
    f(torch.ones(3, device=dev))
    f(torch.ones(3, device=dev))  # same graph: a cache hit
    with pytest.raises(RuntimeError, match="Maximum number of different graphs allowed per function exceeded: 1"):
        f(torch.ones(5, device=dev))


def test_experimental_pjrt_preview_module():
    from torch_xla.experimental import pjrt
    assert pjrt.device_type() == xr.device_type() and pjrt.world_size() == 1
    assert pjrt.rendezvous("eco") is not None


def test_per_device_queue_and_replica_groups():
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_multiprocessing as xmp
    q = pl.PerDeviceQueue(torch_xla.device(), 2, 3)
    assert q.queue.maxsize == 3 and q.cpu_loader_queue.maxsize == 2
    assert xmp.create_optimized_replica_groups() is None


def test_data_parallel_one_device():
    from torch_xla.distributed.data_parallel import DataParallel
    model = torch.nn.Linear(2, 1)
    dp = DataParallel(model)
    loader = [(torch.ones(3, 2), torch.zeros(3, 1))] * 2

    def loop(m, device_loader, device, context):
        return sum(1 for _ in device_loader)

    assert dp(loop, loader) == [2]
    with pytest.raises(NotImplementedError):
        DataParallel(model, device_ids=["xla:0", "xla:1"])


def test_serialization_tensor_reference(tmp_path):
    from torch_xla.utils import serialization
    path = str(tmp_path / "ck")
    os.makedirs(path + ".tensors")
    torch.save(torch.arange(3), os.path.join(path + ".tensors", "tensor_0.pt"))
    torch.save({"w": serialization.TensorReference(0)}, path)
    assert torch.equal(serialization.load(path)["w"], torch.arange(3))
