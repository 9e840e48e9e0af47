"""XLAPatchedLinear / apply_xla_patch_to_nn_linear (torch_xla.distributed.spmd):
nn.Linear as dot products over the last dims (no reshape to 2-D), with the values and gradients of F.linear, and under
autocast a bf16 product in forward and backward."""
import re

import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.distributed.spmd as xs


def _run(fn, device, x0, w0, b0):
    x, w, b = (t.clone().to(device).requires_grad_() for t in (x0, w0, b0))
    y = fn(x, w, b)
    (y * y).sum().backward()
    return [t.detach().cpu() for t in (y, x.grad, w.grad, b.grad)]


def test_values_and_gradients_match_linear(dev):
    g = torch.Generator().manual_seed(0)
    x0, w0, b0 = torch.randn(2, 5, 3, generator=g), torch.randn(4, 3, generator=g), torch.randn(4, generator=g)
    got = _run(xs.XLAPatchedLinear.apply, dev, x0, w0, b0)
    want = _run(F.linear, "cpu", x0, w0, b0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    cpu = _run(xs.XLAPatchedLinear.apply, "cpu", x0, w0, b0)  # einsum off the device
    for a, b in zip(cpu, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_patched_3d_linear_keeps_its_dims(dev):
    linear = torch.nn.Linear(2, 4, bias=False).to(dev)
    xs.apply_xla_patch_to_nn_linear(linear)  # the module itself is a Linear
    y = linear(torch.randn(4, 3, 2).to(dev))
    assert "reshape" not in torch_xla._XLAC._get_xla_tensors_hlo([y])


def test_autocast_runs_the_products_in_bf16(dev):
    linear = torch.nn.Linear(10, 15).to(dev)
    x = torch.randn(5, 10).to(dev).requires_grad_()
    with torch.autocast("xla", dtype=torch.bfloat16):
        out = xs.xla_patched_nn_linear_forward(linear, x)
        loss = (out.float() ** 2).mean()
    assert out.dtype == torch.bfloat16
    loss.backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([linear.weight.grad])
    dots = [line for line in hlo.splitlines() if " dot(" in line]
    assert dots and all(re.search(r"= bf16\[", line) for line in dots), dots
    assert linear.weight.grad.dtype == torch.float32


def test_patch_reaches_every_linear_and_keeps_its_parameters(dev):
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                            torch.nn.Sequential(torch.nn.Linear(4, 2, bias=False))).to(dev)
    x = torch.randn(6, 3).to(dev)
    before = m(x).cpu()
    params = [id(p) for p in m.parameters()]
    assert xs.apply_xla_patch_to_nn_linear(m) is m
    assert m[0].forward.__func__ is xs.xla_patched_nn_linear_forward
    assert m[2][0].forward.__func__ is xs.xla_patched_nn_linear_forward
    assert [id(p) for p in m.parameters()] == params      # the same Parameter objects
    torch.testing.assert_close(m(x).cpu(), before)


def test_xla_dot_general_matches_matmul(dev):
    # upstream's _XLAC._xla_dot_general: ((lhs contracting, rhs contracting), (lhs batch, rhs batch))
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 4, 5, generator=g), torch.randn(3, 5, 2, generator=g)
    z = torch_xla._XLAC._xla_dot_general(a.to(dev), b.to(dev), (([2], [1]), ([0], [0])))
    torch.testing.assert_close(z.cpu(), torch.bmm(a, b), rtol=1e-5, atol=1e-5)
    w = torch_xla._XLAC._xla_dot_general(a[0].to(dev), b[0].to(dev), (([1], [0]), ()),
                                         preferred_element_type=torch.float64)
    assert w.dtype == torch.float64
    torch.testing.assert_close(w.cpu(), (a[0] @ b[0]).double(), rtol=1e-5, atol=1e-5)
