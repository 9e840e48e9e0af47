"""The `xla` device in PyTorch: registration, factories, transfers, printing,
saving, copying, and the errors a user meets."""
import copy
import io
import textwrap
import traceback
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def test_device_registration(dev):
    assert dev == torch.device("xla", 0)
    assert torch.device("xla").type == "xla"
    assert torch_xla.devices() == [dev]
    assert torch_xla.device_count() == 1
    assert torch_xla.real_devices() == ["CPU:0"]
    t = torch.ones(2, device="xla")
    assert t.device == dev and t.is_xla and xm.is_xla_tensor(t)
    assert not torch.ones(2).is_xla
    assert torch.xla.device_count() == 1
    with pytest.raises(ValueError, match="one XLA device"):
        torch_xla.device(1)


def test_xla_device_alias_warns(dev):
    with pytest.warns(DeprecationWarning):
        assert xm.xla_device() == dev
    assert xm.xla_device_hw(dev) == "CPU"
    assert xm.get_xla_supported_devices() == ["xla:0"]


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(2, 3, device=d),
    lambda d: torch.ones(2, 3, dtype=torch.int32, device=d),
    lambda d: torch.full((2, 2), 7.5, device=d),
    lambda d: torch.arange(10, device=d),
    lambda d: torch.arange(1, 4, 0.5, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    lambda d: torch.tensor(3.5, dtype=torch.float64, device=d),
    lambda d: torch.eye(3, 4, device=d),
    lambda d: torch.linspace(0, 1, 5, device=d),
    lambda d: torch.empty(3, 2, device=d).fill_(2.0),
    lambda d: torch.zeros_like(torch.empty(2, 2, device=d)),
    lambda d: torch.ones(3, device=d).new_full((2,), 4.0),
])
def test_factories_match_cpu(dev, make):
    x = make(dev)
    ref = make("cpu")
    assert x.device == dev and x.dtype == ref.dtype and x.shape == ref.shape
    torch.testing.assert_close(x.cpu(), ref)


def test_random_factories_shapes_and_ranges(dev):
    r = torch.rand(100, device=dev).cpu()
    assert r.shape == (100,) and r.min() >= 0 and r.max() < 1
    n = torch.randn(1000, device=dev).cpu()
    assert abs(n.mean()) < 0.2 and 0.8 < n.std() < 1.2
    i = torch.randint(3, 7, (200,), device=dev).cpu()
    assert i.dtype == torch.int64 and i.min() >= 3 and i.max() < 7


def test_transfers_roundtrip_all_dtypes(dev):
    for dt in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.bfloat16,
               torch.float16, torch.uint8, torch.int8):
        cpu = (torch.arange(6).reshape(2, 3) % 3).to(dt)
        x = cpu.to(dev)
        assert x.dtype == dt
        back = x.cpu()
        assert back.dtype == dt and back.device.type == "cpu"
        torch.testing.assert_close(back, cpu)
        assert x.to("cpu", torch.float32).dtype == torch.float32


def test_int64_and_float64_stay_64_bit(dev):
    big = torch.tensor([2**40 + 1], device=dev)
    assert (big * 2).cpu().item() == 2**41 + 2
    f = torch.tensor([1.0 + 1e-12], dtype=torch.float64, device=dev)
    assert (f - 1.0).cpu().item() == pytest.approx(1e-12, rel=1e-3)


def test_module_to_and_back(dev):
    m = torch.nn.Linear(3, 2)
    ref = m(torch.ones(1, 3))
    m.to(dev)
    assert m.weight.device == dev and isinstance(m.weight, torch.nn.Parameter)
    out = m(torch.ones(1, 3, device=dev))
    torch.testing.assert_close(out.cpu(), ref)
    m.to("cpu")
    assert m.weight.device.type == "cpu"
    torch.testing.assert_close(m(torch.ones(1, 3)), ref)


def test_item_tolist_numpy(dev):
    x = torch.tensor([[1.5, 2.5], [3.5, 4.5]], device=dev)
    assert x[1, 0].item() == 3.5
    assert x.tolist() == [[1.5, 2.5], [3.5, 4.5]]
    assert int(torch.tensor(3, device=dev)) == 3
    assert float(x.sum()) == 12.0
    with pytest.raises(TypeError, match="can't convert xla:0 device type tensor to numpy"):
        x.numpy()
    np.testing.assert_array_equal(x.cpu().numpy(), np.array([[1.5, 2.5], [3.5, 4.5]], dtype=np.float32))


def test_print_format(dev):
    x = torch.tensor([1.0, 2.0], device=dev)
    assert repr(x) == "tensor([1., 2.], device='xla:0')"
    assert str(torch.tensor([1, 2], dtype=torch.int32, device=dev)) == \
        "tensor([1, 2], device='xla:0', dtype=torch.int32)"
    w = torch.ones(2, device=dev, requires_grad=True)
    assert repr(w) == "tensor([1., 1.], device='xla:0', requires_grad=True)"
    assert "grad_fn=<MulBackward0>" in repr(w * 2)
    assert f"{torch.tensor(2.5, device=dev):.2f}" == "2.50"


def test_torch_save_restores_on_the_xla_device(dev, tmp_path):
    # as upstream: torch.load puts a saved XLA tensor back on its device (weights_only=True
    # too); map_location="cpu" keeps it on the CPU; xm.save writes CPU tensors
    m = torch.nn.Linear(3, 2).to(dev)
    path = tmp_path / "ckpt.pt"
    torch.save({"sd": m.state_dict(), "step": 3, "empty": torch.zeros(0, 2, device=dev),
                "cpu": torch.ones(2)}, path)
    ck = torch.load(path)
    assert ck["sd"]["weight"].device == dev and ck["empty"].device == dev and ck["step"] == 3
    assert ck["cpu"].device.type == "cpu" and ck["cpu"].tolist() == [1.0, 1.0]
    assert ck["empty"].shape == (0, 2)
    torch.testing.assert_close(ck["sd"]["weight"].cpu(), m.weight.cpu())
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["sd"]["weight"].device.type == "cpu" and on_cpu["cpu"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["sd"]["bias"], m.bias.cpu())
    xm.save(m.state_dict(), tmp_path / "xm.pt")
    sd2 = torch.load(tmp_path / "xm.pt")
    assert sd2["weight"].device.type == "cpu"
    torch.testing.assert_close(sd2["weight"], m.weight.cpu())
    buf = io.BytesIO()
    w = torch.arange(4.0, device=dev).requires_grad_()
    torch.save([w, w * 2], buf)
    buf.seek(0)
    a, b = torch.load(buf)
    assert a.device == dev and a.requires_grad and a.cpu().tolist() == [0, 1, 2, 3]
    assert b.cpu().tolist() == [0, 2, 4, 6]


def test_a_pickled_path_loads_with_weights_only(tmp_path):
    # Lightning's XLA strategies broadcast a checkpoint's Path through torch.save /
    # a bare torch.load (weights_only by default since torch 2.6)
    buf = io.BytesIO()
    torch.save({"path": tmp_path / "ckpt", "step": 2}, buf)
    buf.seek(0)
    assert torch.load(buf) == {"path": tmp_path / "ckpt", "step": 2}


def test_deepcopy(dev):
    m = torch.nn.Linear(3, 2).to(dev)
    m2 = copy.deepcopy(m)
    assert m2.weight.device == dev
    with torch.no_grad():
        m2.weight.add_(1.0)
    torch.testing.assert_close(m2.weight.cpu(), m.weight.cpu() + 1.0)
    x = torch.arange(3.0, device=dev)
    y = copy.deepcopy(x)
    y.add_(1)
    assert x.cpu().tolist() == [0.0, 1.0, 2.0]


def test_autograd_through_xla(dev):
    x = torch.tensor([1.0, 2.0, 3.0], device=dev, requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.device == dev
    assert x.grad.cpu().tolist() == [2.0, 4.0, 6.0]


def test_autocast_bf16(dev):
    m = torch.nn.Linear(4, 2).to(dev)
    with torch.autocast("xla", dtype=torch.bfloat16):
        y = m(torch.randn(3, 4, device=dev))
    assert y.dtype == torch.bfloat16
    ref = m(torch.ones(3, 4, device=dev))
    with torch.autocast("xla", dtype=torch.bfloat16):
        low = m(torch.ones(3, 4, device=dev))
        assert torch.softmax(low, -1).dtype == torch.float32   # upstream policy: softmax runs in fp32
    torch.testing.assert_close(low.float().cpu(), ref.cpu(), rtol=2e-2, atol=2e-2)


def test_cpu_module_with_xla_input_names_both_devices(dev):
    m = torch.nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match=r"xla:0 and cpu"):
        m(torch.ones(1, 3, device=dev))


def test_shape_error_names_op_shapes_and_line(dev):
    a = torch.ones(2, 3, device=dev)
    b = torch.ones(4, 5, device=dev)
    with pytest.raises(RuntimeError) as err:
        torch.mm(a, b)  # this line is named in the error
    # the message is upstream's; the user's line comes with it in the printed
    # error (an exception note, or appended before Python 3.11)
    msg = str(err.value)
    assert msg.startswith("mm(): cannot matrix-multiply tensors f32[2,3] and f32[4,5].")
    printed = "".join(traceback.format_exception(err.value))
    assert "test_device.py" in printed and "aten::mm(float32[2, 3], float32[4, 5])" in printed


def test_lowering_failure_names_op_shapes_and_line(dev, monkeypatch):
    from torch_xla.engine.lazy import dispatch, tensor
    from torch_xla.engine.ops.op import OpInfo

    def broken(x, *args, **kwargs):
        raise ValueError("rule exploded")

    func = torch.ops.aten.erfinv.default
    monkeypatch.setitem(tensor._handlers, func, dispatch.functional_handler(OpInfo("erfinv", func, broken)))
    x = torch.ones(2, 7, device=dev)
    with pytest.raises(RuntimeError) as err:
        torch.erfinv(x)
    msg = str(err.value)
    assert "aten::erfinv" in msg and "float32[2, 7]" in msg and "test_device.py" in msg and "rule exploded" in msg


def test_importing_starts_no_backend():
    code = ("import torch_xla, torch_xla.engine.runtime.platform as r, torch; "
            "torch.device('xla'); print(r.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.stdout.strip() == "False", out.stderr


def test_runtime_single_process_topology():
    assert xr.device_type() == "CPU"
    assert xr.using_pjrt()
    assert xr.world_size() == 1 and xr.global_ordinal() == 0 and xr.local_ordinal() == 0
    assert xr.process_index() == 0 and xr.process_count() == 1 and xr.host_index() == 0
    assert xr.addressable_device_count() == 1 and xr.local_device_count() == 1
    assert xr.global_device_count() == 1 and xr.global_runtime_device_count() == 1
    assert xm.get_ordinal() == 0 and xm.xrt_world_size() == 1 and xm.get_local_ordinal() == 0
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)


def test_memory_info(dev):
    info = xm.get_memory_info(dev)
    assert set(info) >= {"bytes_used", "bytes_limit"}
    assert info["bytes_limit"] > 0
    # the older keys Lightning's DeviceStatsMonitor reads
    assert info["kb_total"] == info["bytes_limit"] // 1024 and 0 <= info["kb_free"] <= info["kb_total"]


def test_xm_save_cleans_temporary_files(tmp_path, dev):
    import torch_xla.core.xla_model as xm
    path = tmp_path / "ckpt.pt"
    stale = tmp_path / "ckpt.pt.tmp-999999999"      # a writer that died mid-save
    stale.write_bytes(b"x" * 1000)
    xm.save({"w": torch.arange(3.0, device=dev)}, str(path))
    assert not stale.exists()
    assert torch.load(str(path))["w"].tolist() == [0.0, 1.0, 2.0]

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle this")
    with pytest.raises(RuntimeError, match="cannot pickle"):
        xm.save({"w": Unpicklable()}, str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]   # our temp file removed
    assert torch.load(str(path))["w"].tolist() == [0.0, 1.0, 2.0]       # the old checkpoint is whole


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(2, device="xla:1"),
    lambda: torch.ones(2).to("xla:1"),
    lambda: torch.tensor([1.0], device="xla:1"),
    lambda: torch.ones(2, device="xla").to("xla:2"),
    lambda: torch_xla.device(1),
], ids=["factory", "cpu.to", "torch.tensor", "xla.to", "torch_xla.device"])
def test_a_second_device_index_raises_everywhere(make):
    with pytest.raises(ValueError, match=r"owns one XLA device \(xla:0\); got xla:[12]"):
        make()
    assert torch.ones(2).to("xla:0").device == torch.device("xla", 0)


def test_an_unknown_pjrt_device_fails_the_same_way_until_restart():
    code = textwrap.dedent("""
        import os, torch, torch_xla
        for kind in ("DUMMY_DEVICE", "CPU"):
            os.environ["PJRT_DEVICE"] = kind
            try:
                torch_xla._XLAC._init_computation_client()
                print("started")
            except RuntimeError as e:
                print(str(e).split(".")[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.stdout.split("\n")[:2] == ["No PjRtPlugin registered for: DUMMY_DEVICE"] * 2, out.stderr
