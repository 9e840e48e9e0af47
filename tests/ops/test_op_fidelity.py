"""Cases upstream's test_ops.py checks that op_db's default samples miss:
broadcasting and index shapes PyTorch allows, eager's special-function domains,
float32 special functions rounding like eager, and fallback counter names."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met

DEV = torch_xla.device()


def _both(fn, *args):
    want = fn(*args)
    got = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]).cpu()
    return want, got


@pytest.mark.parametrize("name,fn,args", [
    ("take_negative", torch.take, (torch.randn(3, 4), torch.tensor([[0, 5], [-1, -12]]))),
    ("gather_index_smaller", lambda t, i: torch.gather(t, 1, i), (torch.randn(4, 5), torch.tensor([[0, 4], [2, 3]]))),
    ("gather_index_smaller_dim0", lambda t, i: torch.gather(t, 0, i), (torch.randn(4, 5), torch.tensor([[0, 1], [3, 2]]))),
    ("masked_scatter_self_broadcasts", lambda t, m, s: t.masked_scatter(m, s),
     (torch.zeros(4), torch.tensor([[True, False, True, False], [False, True, True, True]]), torch.arange(12.))),
    ("take_along_dim_broadcasts", lambda t, i: torch.take_along_dim(t, i, dim=1),
     (torch.randn(1, 5), torch.tensor([[0, 4], [2, 1], [3, 3]]))),
    ("div_trunc_int64_broadcasts", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
     (torch.tensor([[7], [-7], [9]]), torch.tensor([2, -4]))),
])
def test_shapes_pytorch_allows(name, fn, args):
    want, got = _both(fn, *args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)


def test_gather_with_smaller_index_backward():
    x = torch.randn(4, 5)
    idx = torch.tensor([[0, 4], [2, 3]])

    def grad(t):
        t = t.clone().requires_grad_()
        torch.gather(t, 1, idx.to(t.device)).pow(2).sum().backward()
        return t.grad
    torch.testing.assert_close(grad(x.to(DEV)).cpu(), grad(x))


def test_zeta_domain_matches_eager():
    x = torch.arange(-3, 5).repeat_interleave(8)
    q = torch.arange(-3, 5).repeat(8)
    for a, b in ((x, q), (x.float(), q.float() + 0.5), (x.float() + 0.5, q.float() - 0.5)):
        want, got = _both(torch.special.zeta, a, b)
        torch.testing.assert_close(got, want, equal_nan=True)


def test_float32_digamma_and_trigamma_round_like_eager():
    torch.manual_seed(0)
    t = torch.cat([torch.randn(500) * 9, torch.rand(100) * 12, torch.tensor([-2.5, 0.25, 0.5, 10.0, 1e10])])
    for fn in (torch.digamma, lambda v: torch.polygamma(1, v)):
        want, got = _both(fn, t)
        # upstream's test_ops tolerance for float32 (eager's own rounding, not a looser one)
        torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5)
    want, got = _both(torch.digamma, torch.tensor([0.0, -0.0, -3.0]))
    assert got[0] == -float("inf") and got[1] == float("inf") and got[2].isnan()


def test_fallback_counter_names_the_overload():
    met.clear_all()
    x = torch.arange(4.0).to(DEV)
    out = torch.repeat_interleave(x, torch.tensor([1, 0, 2, 1]).to(DEV), dim=0, output_size=4)
    assert out.cpu().tolist() == [0.0, 2.0, 2.0, 3.0]
    assert "aten::repeat_interleave.Tensor" in met.executed_fallback_ops()


def test_sign_of_nan_and_negative_zero_is_eagers():
    t = torch.tensor([float("inf"), float("nan"), -float("inf"), 0.0, -0.0, 2.0, -3.0])
    for fn in (torch.sign, torch.sgn):
        want, got = _both(fn, t)
        assert torch.equal(got, want)                 # sign(nan) == 0
        assert torch.equal(got.signbit(), want.signbit())   # sign(-0.0) == +0.0
