"""Backward ops lowered as the vjp of the forward rule take the gradient in the
forward output's dtype, whatever the mix of input dtypes (float16 input,
float32 target), as eager does."""
import pytest
import torch
import torch.nn.functional as F

H, F32, BF = torch.float16, torch.float32, torch.bfloat16
G = torch.Generator().manual_seed(0)

LOSSES = [
    ("mse_loss", F.mse_loss),
    ("l1_loss", F.l1_loss),
    ("smooth_l1_loss", F.smooth_l1_loss),
    ("mse_loss_sum", lambda a, b: F.mse_loss(a, b, reduction="sum")),
    ("mse_loss_none", lambda a, b: F.mse_loss(a, b, reduction="none").sum()),
]


@pytest.mark.parametrize("dx,dy", [(H, F32), (F32, H), (BF, F32), (H, BF)])
@pytest.mark.parametrize("name,fn", LOSSES, ids=[n for n, _ in LOSSES])
def test_loss_backward_mixed_dtypes(dev, name, fn, dx, dy):
    x0 = torch.rand(4, 3, generator=G).to(dx)
    y0 = torch.rand(4, 3, generator=G).to(dy)
    x = x0.clone().requires_grad_()
    y = y0.clone().requires_grad_()
    fn(x, y).backward()
    xd = x0.to(dev).requires_grad_()
    yd = y0.to(dev).requires_grad_()
    out = fn(xd, yd)
    out.backward()
    assert xd.grad.dtype == x.grad.dtype and yd.grad.dtype == y.grad.dtype
    tol = dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **tol)
    torch.testing.assert_close(yd.grad.cpu(), y.grad, **tol)


def test_gradscaler_style_fp16_loss(dev):
    # fp16 prediction, fp32 target, scaled loss: the path GradScaler takes
    torch.manual_seed(0)
    lin = torch.nn.Linear(5, 3)
    lx = torch.nn.Linear(5, 3).to(dev)
    lx.load_state_dict(lin.state_dict())
    x, t = torch.randn(4, 5), torch.randn(4, 3)
    (F.mse_loss(F.linear(x.half(), lin.weight.half(), lin.bias.half()), t) * 1024).backward()
    (F.mse_loss(F.linear(x.to(dev).half(), lx.weight.half(), lx.bias.half()), t.to(dev)) * 1024).backward()
    torch.testing.assert_close(lx.weight.grad.cpu(), lin.weight.grad, rtol=1e-2, atol=1e-1)
