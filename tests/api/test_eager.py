"""Eager mode and torch_xla.compile(full_graph=True)."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.experimental as exp
from nets import MNIST


def _train(dev, steps=2, eager=False):
    torch.manual_seed(0)
    model = MNIST()
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(steps)]
    m = copy.deepcopy(model).to(dev)
    # the per-parameter loop: one small op per parameter, whose executables the
    # parameters of one shape share (torch's default for XLA tensors is foreach,
    # one graph per _foreach_ call in eager mode)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.5, foreach=False)
    losses = []
    with exp.eager_mode_context(eager):
        for x, y in data:
            opt.zero_grad()
            loss = F.nll_loss(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            if not eager:
                xm.mark_step()
            losses.append(loss.item())
    return losses, [p.detach().cpu() for p in m.parameters()]


def test_eager_matches_lazy_on_mnist(dev):
    lazy_losses, lazy_params = _train(dev)
    met.clear_all()
    eager_losses, eager_params = _train(dev, eager=True)
    assert not exp.is_eager_mode()
    assert eager_losses == pytest.approx(lazy_losses, rel=1e-5, abs=1e-6)
    for a, b in zip(lazy_params, eager_params):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    names = met.metric_names()
    assert "EagerOpCompileTime" in names and "EagerOpExecuteTime" in names
    assert "CompileTime" not in names
    # ops run one by one: many small executions, each op's executable reused across steps
    assert met.metric_data("EagerOpExecuteTime")[0] > 40
    assert met.counter_value("CachedCompile") > met.counter_value("UncachedCompile")


def test_eager_op_runs_at_once(dev):
    a = torch.randn(3, 3).to(dev)
    with exp.eager_mode_context(True):
        b = a @ a
        assert b._lazy.value[0].kind == 0          # device data already
        assert torch_xla._XLAC._get_use_eager_mode()
    c = b + 1
    assert c._lazy.value[0].kind == 2              # lazy again
    assert torch.allclose(c.cpu(), a.cpu() @ a.cpu() + 1, atol=1e-5)


def test_compile_inside_eager_is_one_graph(dev):
    a = torch.randn(4, 4).to(dev)

    @torch_xla.compile
    def f(t):
        return (t @ t).relu().sum()

    with exp.eager_mode_context(True):
        met.clear_all()
        out = f(a)
    assert met.metric_data("CompileTime")[0] == 1 and met.metric_data("ExecuteTime")[0] == 1
    assert "EagerOpExecuteTime" not in met.metric_names()
    assert torch.allclose(out.cpu(), (a.cpu() @ a.cpu()).relu().sum(), atol=1e-4)


def test_torch_compile_inside_eager_is_one_graph(dev):
    # the compiled graph is traced lazily (its placeholders hold no data) and runs
    # as one execution, not op by op
    a = torch.randn(4, 4).to(dev)
    f = torch.compile(lambda t: torch.cos(torch.sin(t)) * 2, backend="openxla")
    with exp.eager_mode_context(True):
        met.clear_all()
        out = f(a)
        xm.wait_device_ops()
    assert met.metric_data("ExecuteTime")[0] == 1
    assert "EagerOpExecuteTime" not in met.metric_names()
    assert (met.counter_value("DynamoLazyGraph") or 0) == 0
    assert torch.allclose(out.cpu(), torch.cos(torch.sin(a.cpu())) * 2, atol=1e-5)


def test_full_graph_raises_on_item(dev):
    a = torch.randn(4, 4).to(dev)

    @torch_xla.compile(full_graph=True)
    def bad(t):
        y = (t * 2).sum()
        return y.item()

    with pytest.raises(RuntimeError, match="Unexpected execution happens inside the compiled function, exiting"):
        bad(a)

    @torch_xla.compile(full_graph=True)
    def good(t):
        return (t * 2).sum()

    assert abs(good(a).item() - (a.cpu() * 2).sum().item()) < 1e-4
    assert torch_xla._XLAC._get_allow_execution()


def test_eager_debug_mode_env():
    import os
    import subprocess
    import sys
    code = ("import torch, torch_xla, torch_xla.debug.metrics as met\n"
            "a = torch.randn(2, 2).to(torch_xla.device())\n"
            "b = a * 2\n"
            "assert b._lazy.value[0].kind == 0, 'not executed'\n"
            "print('eager', torch_xla._XLAC._get_use_eager_mode(), 'EagerOpExecuteTime' in met.metric_names())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, XLA_USE_EAGER_DEBUG_MODE="1", JAX_PLATFORMS="cpu"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "eager True True" in p.stdout
