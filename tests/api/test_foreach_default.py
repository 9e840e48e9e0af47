"""torch picks its foreach optimizer path for XLA tensors (as for upstream's plain
tensors on `xla`), and the foreach step equals eager PyTorch's on the CPU."""
import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach

import torch_xla
import torch_xla.core.xla_model as xm


def test_optimizers_default_to_foreach_on_xla():
    m = torch.nn.Linear(3, 2).to(torch_xla.device())
    assert _default_to_fused_or_foreach(list(m.parameters()), False, False) == (False, True)


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                                  lambda p: torch.optim.Adam(p, lr=0.01),
                                  lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True)],
                         ids=["sgd", "adam", "adamw"])
def test_foreach_step_matches_eager(make):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    dev = torch_xla.device()
    xla = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    xla.load_state_dict(cpu.state_dict())
    xla.to(dev)
    x, y = torch.randn(6, 5), torch.randn(6, 3)
    opt_c, opt_x = make(cpu.parameters()), make(xla.parameters())
    for _ in range(3):
        for m, opt, xs, ys in ((cpu, opt_c, x, y), (xla, opt_x, x.to(dev), y.to(dev))):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xs), ys).backward()
            opt.step()
        xm.mark_step()
    for a, b in zip(cpu.parameters(), xla.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_inplace_fast_path_keeps_eager_refusals():
    dev = torch_xla.device()
    t = torch.zeros(3, dtype=torch.long, device=dev)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.add_(torch.ones(3, device=dev) * 0.5)
    with pytest.raises(RuntimeError):
        t.add_(torch.ones(2, 3, dtype=torch.long, device=dev))   # broadcast larger than self
    f = torch.ones(2, 3, device=dev)
    f.mul_(torch.tensor([1.0, 2.0, 3.0], device=dev))
    f.add_(torch.ones(3, device=dev), alpha=2)
    torch.testing.assert_close(f.cpu(), torch.tensor([[3.0, 4.0, 5.0]] * 2))
