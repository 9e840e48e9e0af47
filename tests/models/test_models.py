"""The core loop trains the issue's three models exactly like eager CPU.

Each model runs 5 steps on the CPU and on the XLA device from the same seed
and batches; losses must match within float tolerance and fall, and a
static-shape loop compiles at most twice (every later step is cached)."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from nets import GPT, MNIST, ResNet


def _train(model_fn, batches, loss_fn, opt_fn, steps=5, param_atol=1e-4):
    torch.manual_seed(0)
    cpu_model = model_fn()
    dev = torch_xla.device()
    xla_model = copy.deepcopy(cpu_model).to(dev)
    cpu_opt, xla_opt = opt_fn(cpu_model.parameters()), opt_fn(xla_model.parameters())
    cpu_losses, xla_losses, compiles = [], [], []
    for step in range(steps):
        data = batches[step % len(batches)]
        cpu_opt.zero_grad()
        loss = loss_fn(cpu_model, *data)
        loss.backward()
        cpu_opt.step()
        cpu_losses.append(loss.item())

        xla_opt.zero_grad()
        loss = loss_fn(xla_model, *[d.to(dev) for d in data])
        loss.backward()
        xla_opt.step()
        xm.mark_step()
        xla_losses.append(loss.item())
        compiles.append(met.counter_value("UncachedCompile") or 0)
    for p_cpu, p_xla in zip(cpu_model.parameters(), xla_model.parameters()):
        torch.testing.assert_close(p_xla.cpu(), p_cpu, rtol=1e-4, atol=param_atol)
    return cpu_losses, xla_losses, compiles


def _check(cpu_losses, xla_losses, compiles, steps=5):
    assert xla_losses == pytest.approx(cpu_losses, rel=1e-4, abs=1e-5)
    # a static-shape loop compiles at most twice; every later step is a cache hit
    assert compiles[-1] <= 2
    assert compiles[-1] == compiles[2]
    assert met.counter_value("CachedCompile") >= steps - 2


def _batches(make, n=1):
    g = torch.Generator().manual_seed(1)
    return [make(g) for _ in range(n)]


def test_mnist_sgd_momentum_weight_decay():
    batches = _batches(lambda g: (torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)))
    res = _train(MNIST, batches, lambda m, x, y: F.nll_loss(m(x), y),
                 lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5, weight_decay=1e-4))
    _check(*res)
    assert res[1][-1] < res[1][0]  # the loss falls on a repeated batch


@pytest.mark.parametrize("foreach", [False, True])
def test_gpt_adamw(foreach):
    batches = _batches(lambda g: (torch.randint(0, 64, (4, 16), generator=g), torch.randint(0, 64, (4, 16), generator=g)))
    # Adam turns float-rounding noise in (mathematically) zero gradients, such as
    # the attention key bias's, into +-lr steps: parameters agree to ~lr/10
    res = _train(GPT, batches, lambda m, x, y: m(x, y), lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=foreach),
                 param_atol=2e-3)
    _check(*res)
    assert res[1][-1] < res[1][0]


@pytest.mark.parametrize("foreach", [False, True])
def test_resnet_adam_train_and_eval(foreach):
    batches = _batches(lambda g: (torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)))
    res = _train(ResNet, batches, lambda m, x, y: F.cross_entropy(m(x), y),
                 lambda p: torch.optim.Adam(p, lr=1e-2, foreach=foreach))
    _check(*res)
    assert res[1][-1] < res[1][0]


def test_resnet_eval_mode_matches_cpu():
    torch.manual_seed(0)
    model = ResNet()
    x = torch.randn(2, 3, 16, 16)
    model.train()
    model(x)  # moves the running statistics away from their initial values
    model.eval()
    dev = torch_xla.device()
    xla_model = copy.deepcopy(model).to(dev)
    with torch.no_grad():
        torch.testing.assert_close(xla_model(x.to(dev)).cpu(), model(x), rtol=1e-4, atol=1e-5)


def test_batchnorm_running_stats_follow_cpu():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3, momentum=0.3)
    dev = torch_xla.device()
    xbn = copy.deepcopy(bn).to(dev)
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        bn(x)
        xbn(x.to(dev))
    torch.testing.assert_close(xbn.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(xbn.running_var.cpu(), bn.running_var)
    assert xbn.num_batches_tracked.item() == 3


@pytest.mark.parametrize("opt", ["sgd", "sgd_foreach", "adam", "adamw_foreach"])
def test_optimizers_on_both_paths(opt):
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False),
        "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=True),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01, foreach=False),
        "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    }[opt]
    batches = _batches(lambda g: (torch.randn(16, 8, generator=g), torch.randn(16, 2, generator=g)))
    res = _train(lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)),
                 batches, lambda m, x, y: F.mse_loss(m(x), y), make)
    _check(*res)
