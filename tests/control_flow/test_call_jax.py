"""call_jax: a JAX function as one graph node, with gradients through jax.vjp."""
import jax
import jax.numpy as jnp
import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental.jax_interop import call_jax


def _jax_gelu_mlp(x, w, b, *, scale):
    h = jax.nn.gelu(x @ w + b, approximate=True)
    return {"out": jnp.tanh(h) * scale, "norm": jnp.sum(h * h, axis=-1)}


def _torch_gelu_mlp(x, w, b, scale):
    h = torch.nn.functional.gelu(x @ w + b, approximate="tanh")
    return {"out": torch.tanh(h) * scale, "norm": (h * h).sum(-1)}


def test_values_and_grads_match_torch(dev):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 4), torch.randn(4, 3), torch.randn(3)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    want = _torch_gelu_mlp(*leaves, 0.5)
    (want["out"].pow(2).sum() + want["norm"].sum()).backward()

    xl = [t.to(dev).requires_grad_() for t in (x, w, b)]
    got = call_jax(_jax_gelu_mlp, xl, {"scale": 0.5})
    assert set(got) == {"out", "norm"} and got["out"].shape == (5, 3) and got["norm"].shape == (5,)
    (got["out"].pow(2).sum() + got["norm"].sum()).backward()
    xm.mark_step()
    for k in ("out", "norm"):
        torch.testing.assert_close(got[k].cpu(), want[k].detach(), rtol=1e-5, atol=1e-5)
    for g, t in zip(xl, leaves):
        torch.testing.assert_close(g.grad.cpu(), t.grad, rtol=1e-4, atol=1e-5)


def test_mixed_dtypes_int_output_and_cache(dev):
    def fn(a, idx):
        return a[idx] * 2, jnp.argmax(a, axis=-1)

    a = torch.randn(4, 6)
    idx = torch.tensor([3, 0, 1])
    counts = []
    for _ in range(2):
        ga, am = call_jax(fn, (a.to(dev), idx.to(dev)))
        xm.mark_step()
        assert am.dtype == torch.int64
        torch.testing.assert_close(ga.cpu(), a[idx] * 2)
        assert torch.equal(am.cpu(), a.argmax(-1))
        counts.append(met.metric_data("CompileTime")[0])
    assert counts[0] == counts[1]   # the second call reuses the graph


def test_call_jax_inside_a_torch_graph_backward(dev):
    # a JAX op in the middle of torch ops, differentiated end to end
    x = torch.randn(8, requires_grad=True)
    want = (torch.cumsum(torch.sin(x), 0) ** 2).sum()
    want.backward()
    xd = x.detach().to(dev).requires_grad_()
    got = (call_jax(jnp.cumsum, (torch.sin(xd),), {"axis": 0}) ** 2).sum()
    got.backward()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


def test_cpu_tensor_rejected():
    with pytest.raises(TypeError, match="XLA device"):
        call_jax(jnp.sin, (torch.ones(2),))


def _platform_norm(x):
    # a function that picks its formulation by the platform it is lowered for (as
    # custom_kernel's cuDNN attention does): same values, other vjp residuals
    from torch_xla.engine import api
    if api.lowering_platform() is not None:
        return jnp.exp(0.5 * jnp.log(jnp.sum(x * x, axis=-1, keepdims=True)))
    return jnp.linalg.norm(x, axis=-1, keepdims=True)


def test_platform_choice_inside_a_function_trains(dev):
    # the saved residuals and the op check are shaped for the platform the graph
    # compiles for, not for the shape-only evaluation (which sees no platform)
    torch.manual_seed(0)
    x = torch.randn(3, 4) + 0.5
    leaf = x.clone().requires_grad_()
    want = torch.linalg.vector_norm(leaf, dim=-1, keepdim=True)
    (want * torch.arange(3.0).view(3, 1)).sum().backward()
    xd = x.to(dev).requires_grad_()
    got = call_jax(_platform_norm, (xd,))
    (got * torch.arange(3.0).view(3, 1).to(dev)).sum().backward()
    xm.mark_step()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), leaf.grad, rtol=1e-5, atol=1e-5)
