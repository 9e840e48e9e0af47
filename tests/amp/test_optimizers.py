"""Sync-free optimizers, GradScaler and fused optimizer kernels on the device.

- torch_xla.amp.syncfree SGD/Adam/AdamW match torch's optimizers over 10 steps
  with every other step skipped through a device-side found_inf, and `step`
  never reads the device from the host (no transfer, no execution).
- torch.optim.{Adam,AdamW,SGD}(fused=True) run in the graph (no CPU fallback)
  and match eager CPU's non-fused optimizers over 5 steps.
- GradScaler with float16 autocast trains like eager CPU and skips a step with
  an inf gradient without a host read in step()."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.amp
import torch_xla.debug.metrics as met
from torch_xla.amp import syncfree


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _host_reads():
    t = met.metric_data("TransferFromDeviceTime")
    e = met.metric_data("ExecuteTime")
    return ((t[0] if t else 0), (e[0] if e else 0), met.counter_value("aten::_local_scalar_dense") or 0)


def _fallbacks():
    # aten::<op> counts an op run on the CPU (aten::_local_scalar_dense: a host read)
    return [n for n in met.counter_names() if n.startswith("aten::") and n != "aten::_local_scalar_dense"]


SYNCFREE = [
    (syncfree.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5)),
    (syncfree.SGD, torch.optim.SGD, dict(lr=0.1, weight_decay=0.1)),
    (syncfree.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5, weight_decay=0.1, dampening=0.1)),
    (syncfree.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5, weight_decay=0.1, nesterov=True, maximize=True)),
    (syncfree.Adam, torch.optim.Adam, dict(lr=1e-2, betas=(0.9, 0.99))),
    (syncfree.Adam, torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (syncfree.Adam, torch.optim.Adam, dict(lr=1e-2, weight_decay=0.01, amsgrad=True, maximize=True)),
    (syncfree.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (syncfree.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
]


@pytest.mark.parametrize("cls,ref_cls,kw", SYNCFREE, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(SYNCFREE)])
def test_syncfree_matches_torch(dev, cls, ref_cls, kw):
    ref = _model()
    m = copy.deepcopy(ref).to(dev)
    opt = cls(m.parameters(), **kw)
    ref_opt = ref_cls(ref.parameters(), **kw)
    x, t = torch.randn(10, 6), torch.randn(10, 3)
    xd, td = x.to(dev), t.to(dev)
    for i in range(10):
        opt.zero_grad()
        F.mse_loss(m(xd), td).backward()
        skip = i % 2 == 0
        if skip:
            m[0].weight.grad.mul_(float("nan"))
        found_inf = torch.tensor(1.0 if skip else 0.0).to(dev)
        torch_xla.sync()
        before = _host_reads()
        opt.step(found_inf=found_inf)
        assert _host_reads() == before, "step read the device from the host"
        torch_xla.sync()
        ref_opt.zero_grad()
        F.mse_loss(ref(x), t).backward()
        if not skip:
            ref_opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    state = opt.state[m[0].weight]
    assert state["step"].device.type == "xla"
    assert state["step"].cpu().item() == 5
    assert not _fallbacks(), _fallbacks()


def test_syncfree_without_found_inf_is_torch_step(dev):
    ref = _model()
    m = copy.deepcopy(ref).to(dev)
    opt = syncfree.Adam(m.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    x = torch.randn(4, 6)
    for mm, oo, xx in ((m, opt, x.to(dev)), (ref, ref_opt, x)):
        mm(xx).sum().backward()
        oo.step()
    torch.testing.assert_close(m[0].weight.cpu(), ref[0].weight.detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        opt.step(found_inf=torch.zeros(2, device=dev))


FUSED = [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
    (torch.optim.Adam, dict(lr=1e-2)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.2, maximize=True)),
]


@pytest.mark.parametrize("cls,kw", FUSED, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(FUSED)])
def test_fused_optimizer_in_graph(dev, cls, kw):
    ref = _model()
    m = copy.deepcopy(ref).to(dev)
    opt = cls(m.parameters(), fused=True, **kw)
    ref_opt = cls(ref.parameters(), **kw)      # eager CPU, not fused
    x, t = torch.randn(10, 6), torch.randn(10, 3)
    xd, td = x.to(dev), t.to(dev)
    for _ in range(5):
        opt.zero_grad()
        F.mse_loss(m(xd), td).backward()
        opt.step()
        torch_xla.sync()
        ref_opt.zero_grad()
        F.mse_loss(ref(x), t).backward()
        ref_opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    assert not _fallbacks(), _fallbacks()    # no aten::_fused_* on the CPU


def test_fused_adamw_grad_scale_and_found_inf(dev):
    # the kernel's own contract: grads are unscaled in place; found_inf=1 leaves everything
    p = torch.randn(5)
    g = torch.randn(5) * 8
    pd, gd = p.to(dev), g.to(dev)
    m, v, s = torch.zeros(5, device=dev), torch.zeros(5, device=dev), torch.ones((), device=dev)
    torch._fused_adamw_([pd], [gd], [m], [v], [], [s], lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.1,
                        eps=1e-8, amsgrad=False, maximize=False, grad_scale=torch.tensor(8.0, device=dev),
                        found_inf=torch.tensor(1.0, device=dev))
    torch.testing.assert_close(pd.cpu(), p)
    torch.testing.assert_close(gd.cpu(), g)
    torch.testing.assert_close(m.cpu(), torch.zeros(5))
    torch._fused_adamw_([pd], [gd], [m], [v], [], [s], lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.1,
                        eps=1e-8, amsgrad=False, maximize=False, grad_scale=torch.tensor(8.0, device=dev),
                        found_inf=torch.tensor(0.0, device=dev))
    pc, gc = p.clone(), g.clone() / 8
    torch.optim.AdamW([pc], lr=0.1, weight_decay=0.1)
    ref = torch.nn.Parameter(p.clone())
    ref.grad = gc.clone()
    torch.optim.AdamW([ref], lr=0.1, weight_decay=0.1).step()
    torch.testing.assert_close(gd.cpu(), gc)
    torch.testing.assert_close(pd.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)


def _train_scaled(model, opt, scaler, x, t, dev, steps, poison=None):
    losses = []
    for i in range(steps):
        opt.zero_grad()
        with torch.autocast(dev.type if dev is not None else "cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), t)
        scaler.scale(loss).backward()
        if poison == i:
            model[0].weight.grad.fill_(float("inf"))
        scaler.step(opt)
        scaler.update()
        losses.append(loss)
    return losses


@pytest.mark.parametrize("opt_name", ["syncfree_adamw", "fused_adamw", "sgd"])
def test_grad_scaler_fp16_matches_eager(dev, opt_name):
    ref = _model()
    m = copy.deepcopy(ref).to(dev)

    def make(params, on_xla):
        if opt_name == "syncfree_adamw":
            return (syncfree.AdamW if on_xla else torch.optim.AdamW)(params, lr=1e-2)
        if opt_name == "fused_adamw":
            return torch.optim.AdamW(params, lr=1e-2, fused=on_xla)
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    opt, ref_opt = make(m.parameters(), True), make(ref.parameters(), False)
    scaler = torch_xla.amp.GradScaler(init_scale=2.0 ** 10, growth_interval=2)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    x, t = torch.randn(10, 6), torch.randn(10, 3)
    xd, td = x.to(dev), t.to(dev)
    losses = []
    for i in range(6):
        opt.zero_grad()
        with torch_xla.amp.autocast(dev, dtype=torch.float16):
            loss = F.mse_loss(m(xd), td)
        assert loss.dtype == torch.float32
        scaler.scale(loss).backward()
        if i == 2:
            m[0].weight.grad.fill_(float("inf"))
        if opt_name != "sgd":
            torch_xla.sync()
            before = _host_reads()
        scaler.step(opt)
        scaler.update()
        if opt_name != "sgd":
            assert _host_reads() == before, "GradScaler.step/update read the device from the host"
        torch_xla.sync()
        losses.append(loss.cpu().item())
    ref_losses = []
    for i in range(6):
        ref_opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(ref(x), t)
        ref_scaler.scale(loss).backward()
        if i == 2:
            ref[0].weight.grad.fill_(float("inf"))
        ref_scaler.step(ref_opt)
        ref_scaler.update()
        ref_losses.append(loss.item())
    assert scaler.get_scale() == ref_scaler.get_scale()
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=2e-2, atol=2e-3)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=2e-2, atol=2e-3)
    assert not _fallbacks(), _fallbacks()


def test_grad_scaler_fp16_gpt_matches_eager_cpu_autocast(dev):
    # the GPT decoder under fp16 autocast with GradScaler and SGD momentum, 4 steps,
    # one with an inf gradient (skipped, scale halved), against eager CPU autocast
    from nets import GPT
    torch.manual_seed(0)
    ref = GPT(layers=1)
    m = copy.deepcopy(ref).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    scaler = torch_xla.amp.GradScaler(init_scale=2.0 ** 12, growth_interval=2)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    idx, tgt = torch.randint(0, 64, (4, 16), generator=g), torch.randint(0, 64, (4, 16), generator=g)

    def train(model, o, sc, device_type, batch_dev):
        losses = []
        for i in range(4):
            o.zero_grad()
            with torch.autocast(device_type, dtype=torch.float16):
                loss = model(idx.to(batch_dev), tgt.to(batch_dev))
            sc.scale(loss).backward()
            if i == 1:
                model.head.weight.grad.fill_(float("inf"))
            sc.step(o)
            sc.update()
            if device_type == "xla":
                torch_xla.sync()
            losses.append(float(loss.detach().float().cpu()))
        return losses

    got = train(m, opt, scaler, "xla", dev)
    want = train(ref, ref_opt, ref_scaler, "cpu", "cpu")
    assert scaler.get_scale() == ref_scaler.get_scale() == 2.0 ** 12   # halved once, grown once
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-2, atol=1e-2)
    assert got[-1] < got[0]
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=2e-2, atol=5e-3)
