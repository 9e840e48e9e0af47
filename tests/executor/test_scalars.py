"""Python scalars: 0 and 1 are constants in the graph, every other number is
cached device data (so changing it never recompiles); shapes key graphs."""
import os
import subprocess
import sys
import textwrap

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def _compiles():
    return met.counter_value("UncachedCompile") or 0


def _fresh(dev, *shape):
    t = torch.randn(*shape).to(dev)
    xm.mark_step()
    met.clear_all()
    return t


def test_zero_and_one_are_constants_others_are_data(dev):
    x = torch.ones(3, device=dev)
    text = torch_xla._XLAC._get_xla_tensors_text([x * 1 + 0 - 2.5])
    assert "device_data" in text and "scalar=2.5" in text
    assert "scalar=1" not in text and "scalar=0" not in text


def test_changing_python_numbers_compile_once(dev):
    x = _fresh(dev, 4, 4)
    outs = []
    for i in range(5):
        f = 0.1 * (i + 2) + 0.0123     # a float that changes every step
        n = i + 2                      # an int that changes every step
        outs.append(x * f + n - (x > f).sum() * 3.5)
        xm.mark_step()
    assert _compiles() == 1
    assert met.counter_value("CachedCompile") == 4
    xc = x.cpu()
    for i, o in enumerate(outs):
        f, n = 0.1 * (i + 2) + 0.0123, i + 2
        assert torch.allclose(o.cpu(), xc * f + n - (xc > f).sum() * 3.5)


def test_zero_and_one_differ_from_other_numbers(dev):
    x = _fresh(dev, 3)
    keep = []
    for v in (0, 1, 2, 3, 0.0, 1.0, 4.5):
        keep.append((x + v).sum())   # live results: a barrier runs what is alive
        xm.mark_step()
    # constants 0, 1, 0.0, 1.0 give a graph each (an int and a float constant
    # can promote differently); 2 and 3 share one (int leaf), 4.5 is a float leaf
    assert _compiles() == 6


def test_learning_rate_schedule_compiles_once(dev):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.randn(16, 8).to(dev)
    target = torch.randn(16, 4).to(dev)
    ref = torch.nn.Linear(8, 4)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)

    def step(m, o, d, t, lr):
        for g in o.param_groups:
            g["lr"] = lr
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(m(d), t)
        loss.backward()
        o.step()
        return loss

    step(model, opt, data, target, 0.05)   # warm-up: momentum buffers appear
    xm.mark_step()
    step(ref, ropt, data.cpu(), target.cpu(), 0.05)
    met.clear_all()
    for i in range(5):
        lr = 0.05 / (i + 2) + 1e-4 * i
        step(model, opt, data, target, lr)
        xm.mark_step()
        step(ref, ropt, data.cpu(), target.cpu(), lr)
    assert _compiles() == 1
    assert torch.allclose(model.weight.detach().cpu(), ref.weight.detach(), atol=1e-6)


def test_cpu_zero_dim_tensors_are_data_too(dev):
    x = _fresh(dev, 5)
    keep = []
    for v in (0.3, 0.7, 2.0):
        keep.append((x * torch.tensor(v)).sum())
        xm.mark_step()
    assert _compiles() == 1
    assert [round(k.item(), 4) for k in keep] == [round(float((x.cpu() * v).sum()), 4) for v in (0.3, 0.7, 2.0)]


def test_one_compile_per_distinct_shape(dev):
    met.clear_all()
    w = torch.randn(4, 3).to(dev)
    xm.mark_step()
    met.clear_all()
    sizes = [3, 5, 3, 5, 7, 7, 3]
    results = []
    for n in sizes:
        x = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4).to(dev)
        results.append((x @ w * 0.5).sum(0))
        xm.mark_step()
    assert _compiles() == len(set(sizes))
    assert met.counter_value("CachedCompile") == len(sizes) - len(set(sizes))
    wc = w.cpu()
    for n, r in zip(sizes, results):
        x = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4)
        assert torch.allclose(r.cpu(), (x @ wc * 0.5).sum(0), rtol=1e-5)


_NO_SPECIAL = textwrap.dedent("""
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    dev = torch_xla.device()
    x = torch.randn(3).to(dev)
    xm.mark_step()
    met.clear_all()
    outs = []
    for v in (0, 1, 2, 3):
        outs.append(x + v)
        xm.mark_step()
    text = torch_xla._XLAC._get_xla_tensors_text([x * 1])
    ok = all(torch.equal(o.cpu(), x.cpu() + v) for o, v in zip(outs, (0, 1, 2, 3)))
    print(met.counter_value("UncachedCompile"), "scalar=1" in text, ok)
""")


def test_no_special_scalars_env():
    env = dict(os.environ, XLA_NO_SPECIAL_SCALARS="1")
    env.setdefault("JAX_PLATFORMS", "cpu")
    out = subprocess.run([sys.executable, "-c", _NO_SPECIAL], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    # 0, 1, 2, 3 are all data: one graph; x * 1 holds a scalar leaf
    assert out.stdout.split() == ["1", "True", "True"]
