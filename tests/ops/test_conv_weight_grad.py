"""On the CPU a convolution's weight gradient is lowered as one dot per kernel
offset where that pays (XLA:CPU's convolution-over-the-batch form of it is
slower; each dot costs compile time): the gradients match torch on the CPU
for strides, padding, dilation and 1-3 spatial dims; grouped, transposed and
small large-kernel convolutions keep XLA's form."""
import pytest
import torch

import torch_xla

CASES = [
    (torch.nn.Conv1d, 3, (2, 4, 11), dict(stride=2, padding=1)),
    (torch.nn.Conv2d, 3, (2, 4, 9, 8), dict(padding=1)),
    (torch.nn.Conv2d, (3, 2), (2, 4, 9, 8), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    (torch.nn.Conv2d, 7, (2, 3, 20, 20), dict(stride=2, padding=3, bias=False)),   # small: XLA's form
    (torch.nn.Conv2d, 1, (2, 4, 5, 5), dict(padding=1)),                            # 1x1 with padding
    (torch.nn.Conv2d, 3, (2, 4, 8, 8), dict(groups=2)),                             # XLA's form
    (torch.nn.ConvTranspose2d, 3, (2, 4, 5, 5), dict(stride=2)),                    # XLA's form
    (torch.nn.Conv3d, 2, (1, 4, 4, 5, 6), dict(stride=(1, 2, 1), padding=1)),
]


def _grads(conv, x):
    conv.zero_grad()
    x = x.detach().requires_grad_()
    conv(x).sin().sum().backward()
    return [x.grad] + [p.grad.clone() for p in conv.parameters()]


@pytest.mark.parametrize("cls,k,shape,kw", CASES)
def test_weight_gradient_matches_cpu(cls, k, shape, kw):
    torch.manual_seed(0)
    conv = cls(shape[1], 4, k, **kw)
    x = torch.randn(shape)
    ref = _grads(conv, x)
    dev = torch_xla.device()
    conv.to(dev)
    got = _grads(conv, x.to(dev))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)


def test_weight_gradient_alone():
    # only the weight needs a gradient (a frozen input, as in the first layer)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 5, 3, stride=2, padding=1)
    x = torch.randn(2, 3, 9, 9)
    conv(x).square().sum().backward()
    ref = conv.weight.grad.clone()
    conv.zero_grad()
    conv.to(torch_xla.device())
    conv(x.to(torch_xla.device())).square().sum().backward()
    torch.testing.assert_close(conv.weight.grad.cpu(), ref, rtol=1e-4, atol=1e-4)


def test_bfloat16_weight_gradient():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1).bfloat16()
    x = torch.randn(2, 4, 8, 8).bfloat16()
    ref = _grads(conv, x)
    conv.to(torch_xla.device())
    got = _grads(conv, x.to(torch_xla.device()))
    for g, r in zip(got, ref):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.cpu().float(), r.float(), rtol=3e-2, atol=3e-2)


def test_offsets_form_for_large_kernels_matches_torch():
    # a 7x7 kernel takes the offsets form only on a large input (a ResNet stem);
    # the rule's helper on its own, against torch's weight gradient
    import jax.numpy as jnp
    import numpy as np
    from torch_xla.engine.ops import nn as rules
    torch.manual_seed(0)
    x = torch.randn(2, 3, 17, 15)
    w = torch.randn(4, 3, 5, 7)
    kw = dict(stride=[2, 1], padding=[3, 2], dilation=[1, 2])
    g = torch.randn_like(torch.nn.functional.conv2d(x, w, **kw))
    ref = torch.ops.aten.convolution_backward(g, x, w, None, kw["stride"], kw["padding"], kw["dilation"],
                                              False, [0, 0], 1, [False, True, False])[1]
    got = rules._weight_grad_by_offsets(jnp.asarray(g.numpy()), jnp.asarray(x.numpy()), (5, 7),
                                        kw["stride"], kw["padding"], kw["dilation"])
    np.testing.assert_allclose(np.asarray(got), ref.numpy(), rtol=1e-4, atol=1e-4)
    assert rules._offsets_pay((16, 64, 64, 64), 3, (7, 7))         # ResNet-18's stem, batch 16
    assert not rules._offsets_pay((64, 10, 24, 24), 1, (5, 5))     # the MNIST CNN's first layer
    assert rules._offsets_pay((1, 1, 2, 2), 1, (3, 3))
