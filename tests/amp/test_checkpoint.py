"""torch_xla.utils.checkpoint and xm.optimization_barrier_."""
import copy

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.utils.checkpoint as ckpt


def _block():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(16, 8))


def test_optimization_barrier_in_place(dev):
    a = torch.randn(3, 4)
    b = torch.arange(5)
    ad, bd = a.to(dev) * 2, b.to(dev) + 1
    view = ad[1]
    xm.optimization_barrier_([ad, bd, 3, None])
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([ad, bd])
    assert "opt-barrier" in hlo or "optimization_barrier" in hlo, hlo
    torch.testing.assert_close(ad.cpu(), a * 2)
    torch.testing.assert_close(bd.cpu(), b + 1)
    torch.testing.assert_close(view.cpu(), (a * 2)[1])
    e = torch.ones((), device=dev).expand(3, 4)        # an expanded view: its base goes through
    xm.optimization_barrier_([e, view])
    torch.testing.assert_close(e.cpu(), torch.ones(3, 4))
    # differentiable through: values and grads unchanged
    x = torch.randn(4, device=dev, requires_grad=True)
    y = x * 3
    xm.optimization_barrier_([y])
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 3.0))


def test_checkpoint_matches_plain_values_and_grads(dev):
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([_block() for _ in range(3)]).to(dev)
    plain = copy.deepcopy(blocks)
    blocks.eval()
    plain.eval()           # no dropout: values must agree exactly
    x0 = torch.randn(4, 8)

    def run(mods, use_ckpt):
        x = x0.to(dev).requires_grad_()
        h = x
        for i, b in enumerate(mods):
            h = ckpt.checkpoint(b, h) if (use_ckpt and i > 0) else b(h)
        h.square().sum().backward()
        return h, x.grad

    h1, g1 = run(blocks, True)
    h2, g2 = run(plain, False)
    torch.testing.assert_close(h1.cpu(), h2.cpu())
    torch.testing.assert_close(g1.cpu(), g2.cpu())
    for p, q in zip(blocks.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_checkpoint_preserves_dropout_rng(dev):
    torch.manual_seed(0)
    block = _block().to(dev).train()
    plain = copy.deepcopy(block)
    x0 = torch.randn(6, 8)

    torch_xla.manual_seed(1234)
    x = x0.to(dev).requires_grad_()
    y = ckpt.checkpoint(block, x)
    after_fwd = xm.get_rng_state()
    (y * torch.arange(8.0, device=dev)).sum().backward()
    # the recompute replays the forward's draws and leaves the generator where the forward left it
    assert xm.get_rng_state() == after_fwd

    torch_xla.manual_seed(1234)
    xp = x0.to(dev).requires_grad_()
    yp = plain(xp)
    (yp * torch.arange(8.0, device=dev)).sum().backward()
    torch.testing.assert_close(y.cpu(), yp.cpu())
    torch.testing.assert_close(x.grad.cpu(), xp.grad.cpu())
    for p, q in zip(block.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_checkpoint_sum_loss_expanded_grad(dev):
    # x.sum().backward() hands the block an expanded gradient (upstream's test_grad_checkpoint)
    torch.manual_seed(0)
    convs = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 1)).to(dev)
    plain = copy.deepcopy(convs)
    x = torch.randn(2, 4, 3, 3, device=dev, requires_grad=True)
    ckpt.checkpoint(convs, x).sum().backward()
    plain(x).sum().backward()
    for p, q in zip(convs.parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-5)


def test_checkpoint_under_autocast_and_args(dev):
    lin = torch.nn.Linear(8, 8).to(dev)
    x = torch.randn(2, 8, device=dev, requires_grad=True)
    with torch.autocast("xla"):
        y = ckpt.checkpoint(lambda a, s: lin(a) * s, x, 2.0)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32
    with pytest.raises(ValueError):
        ckpt.checkpoint(lin, x, use_reentrant=False)
    with pytest.raises(ValueError):
        ckpt.checkpoint(lin, x, foo=1)


def test_checkpoint_module_recomputes_with_the_same_dropout_and_kwargs():
    from torch_xla.distributed.fsdp import checkpoint_module
    dev = torch_xla.device()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x, scale=1.0):
            return self.drop(self.lin(x)) * scale

    torch.manual_seed(0)
    plain = Net().to(dev)
    wrapped = checkpoint_module(Net().to(dev))
    wrapped.load_state_dict(plain.state_dict())
    # reentrant checkpointing (upstream's only mode) needs an input that requires grad
    x = torch.randn(4, 8).to(dev).requires_grad_()
    torch_xla.manual_seed(3)
    plain(x, scale=2.0).sum().backward()
    torch_xla.manual_seed(3)
    wrapped(x, scale=2.0).sum().backward()
    torch.testing.assert_close(wrapped.lin.weight.grad.cpu(), plain.lin.weight.grad.cpu())
