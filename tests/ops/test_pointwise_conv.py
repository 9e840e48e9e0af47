"""1x1 convolutions (no padding, one group) lower to a dot: same values and
gradients as torch on the CPU, and the graph holds no XLA convolution."""
import pytest
import torch

import torch_xla

CASES = [
    (torch.nn.Conv1d, (2, 8, 9), dict(stride=2, dilation=3)),
    (torch.nn.Conv2d, (2, 8, 5, 7), dict()),
    (torch.nn.Conv2d, (2, 8, 9, 7), dict(stride=(2, 3))),
    (torch.nn.Conv3d, (1, 8, 3, 5, 6), dict(stride=(1, 2, 1), bias=False)),
]


@pytest.mark.parametrize("cls,shape,kw", CASES)
def test_pointwise_conv_matches_cpu(cls, shape, kw):
    torch.manual_seed(0)
    conv = cls(8, 6, 1, **kw)
    x = torch.randn(shape, requires_grad=True)
    conv(x).square().sum().backward()
    ref = [x.grad] + [p.grad for p in conv.parameters()]

    dev = torch_xla.device()
    cx = cls(8, 6, 1, **kw)
    cx.load_state_dict(conv.state_dict())
    cx.to(dev)
    xx = x.detach().to(dev).requires_grad_()
    y = cx(xx)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([y])
    assert "convolution(" not in hlo and "dot(" in hlo
    y.square().sum().backward()
    got = [xx.grad] + [p.grad for p in cx.parameters()]
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)


def test_other_convolutions_stay_convolutions():
    dev = torch_xla.device()
    for conv in (torch.nn.Conv2d(4, 4, 3), torch.nn.Conv2d(4, 4, 1, padding=1),
                 torch.nn.Conv2d(4, 4, 1, groups=2)):
        x = torch.randn(1, 4, 6, 6)
        with torch.no_grad():
            ref = conv(x)
        conv.to(dev)
        y = conv(x.to(dev))
        assert "convolution(" in torch_xla._XLAC._get_xla_tensors_hlo([y])
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-4)
