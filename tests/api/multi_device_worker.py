"""Run by test_multi_device.py with CPU_NUM_DEVICES=4 in a process no launcher started:
each check uses several XLA devices of the one process and prints `ok <name>`."""
import sys

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr
from torch_xla.engine.lazy.transfers import device_array


def jax_id(t):
    (dev,) = device_array(t).devices()
    return dev.id


def check_listing():
    assert torch_xla.device_count() == 4 == xr.addressable_device_count()
    assert torch_xla.devices() == [torch.device("xla", i) for i in range(4)]
    assert xm.get_xla_supported_devices() == ["xla:0", "xla:1", "xla:2", "xla:3"]
    assert xm.get_xla_supported_devices(max_devices=2) == ["xla:0", "xla:1"]
    try:
        torch.zeros(2, device="xla:4")
    except ValueError as e:
        assert "xla:4 does not exist" in str(e) and "4 XLA devices" in str(e), e
    else:
        raise AssertionError("xla:4 accepted")


def check_ops_run_on_their_device():
    x = torch.arange(12.).reshape(3, 4)
    for i in range(4):
        t = x.to(f"xla:{i}")
        y = (t * 2 + 1).sum(0)
        assert y.device == torch.device("xla", i)
        torch.testing.assert_close(y.cpu(), (x * 2 + 1).sum(0))
        assert jax_id(y) == i
    z = torch.ones(2, 3, device="xla:2") * 3
    assert z.device.index == 2 and jax_id(z) == 2
    torch.testing.assert_close(z.cpu(), torch.full((2, 3), 3.0))


def check_two_devices_in_one_op_is_an_error():
    a = torch.ones(3, device="xla:0")
    b = torch.ones(3, device="xla:1")
    try:
        a + b
    except RuntimeError as e:
        assert "Expected all tensors to be on the same device" in str(e) and "xla:0" in str(e) and "xla:1" in str(e), e
    else:
        raise AssertionError("mixed devices accepted")


def check_copies_between_devices():
    x = torch.randn(4, 5)
    a = x.to("xla:1") * 2
    b = a.to("xla:3")
    assert b.device.index == 3 and jax_id(b) == 3
    torch.testing.assert_close(b.cpu(), x * 2)
    c = torch.zeros(4, 5, device="xla:2")
    c.copy_(a)
    assert c.device.index == 2 and jax_id(c) == 2
    torch.testing.assert_close(c.cpu(), x * 2)
    d = a.to("xla:0", dtype=torch.float64)
    assert d.dtype == torch.float64 and d.device.index == 0
    torch.testing.assert_close(d.cpu(), (x * 2).double())


def check_training_on_a_device_matches_eager():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    dev = torch.device("xla", 2)
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(4):
        x, y = torch.randn(5, 6), torch.randn(5, 2)
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        xm.mark_step()
        rloss = torch.nn.functional.mse_loss(ref(x), y)
        rloss.backward()
        ropt.step()
        ropt.zero_grad()
        torch.testing.assert_close(loss.cpu(), rloss.detach(), rtol=1e-5, atol=1e-6)
    for p, r in zip(model.parameters(), ref.parameters()):
        assert p.device == dev and jax_id(p) == 2
        torch.testing.assert_close(p.cpu(), r.detach(), rtol=1e-5, atol=1e-6)


def check_one_barrier_runs_a_graph_per_device():
    met.clear_all()
    a = torch.full((3,), 5.0, device="xla:0") + 1
    b = torch.full((3,), 7.0, device="xla:3") + 1
    xm.mark_step()
    assert met.counter_value("UncachedCompile") == 2, met.counter_value("UncachedCompile")
    assert jax_id(a) == 0 and jax_id(b) == 3
    torch.testing.assert_close(a.cpu(), torch.full((3,), 6.0))
    torch.testing.assert_close(b.cpu(), torch.full((3,), 8.0))


def check_loader_on_a_device():
    import torch_xla.distributed.parallel_loader as pl
    data = torch.utils.data.DataLoader(torch.arange(8.).unsqueeze(1), batch_size=4)
    got = []
    for batch in pl.MpDeviceLoader(data, torch.device("xla", 1)):
        assert batch.device.index == 1 and jax_id(batch) == 1
        got.append(batch.cpu())
    torch.testing.assert_close(torch.cat(got), torch.arange(8.).unsqueeze(1))


def check_save_and_load_keep_the_device():
    import io
    buf = io.BytesIO()
    torch.save({"w": torch.arange(3.0, device="xla:2")}, buf)
    buf.seek(0)
    w = torch.load(buf)["w"]
    assert w.device.index == 2 and jax_id(w) == 2 and w.cpu().tolist() == [0.0, 1.0, 2.0]


def check_default_device():
    # last: naming a device makes it the default, as upstream's xla_device(n) does
    assert torch_xla.device() == torch.device("xla", 0)
    assert torch_xla.device(3) == torch.device("xla", 3)
    assert torch_xla._XLAC._xla_get_default_device() == "xla:3"
    assert torch_xla.device() == torch.device("xla", 3)
    t = torch.ones(2, device="xla")
    assert t.device.index == 3 and jax_id(t) == 3
    assert torch.ones(2).to("xla:0").device.index == 0


CHECKS = [check_listing, check_ops_run_on_their_device, check_two_devices_in_one_op_is_an_error,
          check_copies_between_devices, check_training_on_a_device_matches_eager,
          check_one_barrier_runs_a_graph_per_device, check_loader_on_a_device, check_save_and_load_keep_the_device, check_default_device]

if __name__ == "__main__":
    for check in CHECKS:
        if len(sys.argv) > 1 and check.__name__ not in sys.argv[1:]:
            continue
        check()
        print("ok", check.__name__, flush=True)
