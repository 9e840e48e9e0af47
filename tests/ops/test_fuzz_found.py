"""Cases the differential fuzzer (tests/fuzz) found, fixed in the lowering rules."""
import pytest
import torch

import torch_xla

DEV = torch_xla.device()


def _both(fn):
    want = fn("cpu")
    got = fn(DEV).cpu()
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.is_floating_point():
        assert torch.equal(got.isnan(), want.isnan())
        got, want = got.nan_to_num(0.0), want.nan_to_num(0.0)
    assert torch.equal(got, want)


@pytest.mark.parametrize("value", [-1, -255, 7])
def test_negative_int_written_into_uint8_wraps(value):
    # eager converts the scalar like C++ (c10::overflows accepts [-255, 255] for uint8)
    def fn(d):
        t = torch.zeros(3, dtype=torch.uint8, device=d)
        t[0] = value
        return t
    _both(fn)
    _both(lambda d: torch.scalar_tensor(value, dtype=torch.uint8, device=d))


def test_scalar_tensor_overflow_still_raises():
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.scalar_tensor(300, dtype=torch.uint8, device=DEV).cpu()


@pytest.mark.parametrize("index_shape", [(0,), (2, 0, 4)])
def test_gather_with_an_empty_index_of_another_rank(index_shape):
    # PyTorch checks no ranks when the index is empty
    _both(lambda d: torch.gather(torch.ones(3, 2, device=d), 1,
                                 torch.zeros(index_shape, dtype=torch.long, device=d)))


def test_scatters_with_an_empty_index_write_nothing():
    idx = lambda d: torch.zeros(0, dtype=torch.long, device=d)  # noqa: E731
    _both(lambda d: torch.ones(3, 2, device=d).scatter(1, idx(d), 5.0))
    _both(lambda d: torch.ones(3, 2, device=d).scatter_add(1, idx(d), torch.zeros(2, 2, device=d)))
    _both(lambda d: torch.ones(3, 2, device=d).scatter_reduce(1, idx(d), torch.zeros(2, 2, device=d), "amax"))
    _both(lambda d: torch.ones(3, 0, 1, device=d).scatter_(
        -2, torch.zeros(1, 0, dtype=torch.long, device=d), torch.zeros(2, 0, 1, device=d)))


@pytest.mark.parametrize("size", [0, 1])
def test_unfold_of_a_0d_tensor(size):
    _both(lambda d: torch.tensor(2.5, device=d).unfold(-1, size, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_lerp_is_exact_at_the_ends_and_rounds_half_once(dtype):
    # eager: weight < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w), in float32 for half inputs
    a = torch.tensor([-1.5, 3.008, 2.0], dtype=dtype)
    b = torch.tensor([0.1988, 0.0, -7.25], dtype=dtype)
    for w in (1.0, 0.0, torch.tensor([0.688, 0.688, 0.9], dtype=dtype)):
        want = torch.lerp(a, b, w)
        got = torch.lerp(a.to(DEV), b.to(DEV), w.to(DEV) if isinstance(w, torch.Tensor) else w).cpu()
        assert torch.equal(got, want), (w, got, want)


def _close(fn, **tol):
    want = fn("cpu")
    got = fn(DEV).cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_activations_round_once_as_eager(dtype):
    # eager computes these in float32 for half inputs and rounds once
    F = torch.nn.functional
    x = lambda d: torch.tensor([-5.0, -4.5, -1.971, -0.3, 0.3, 3.0], dtype=dtype, device=d)  # noqa: E731
    for fn in (F.leaky_relu, lambda t: F.elu(t, alpha=0.5), lambda t: F.celu(t, alpha=2.0)):
        _both(lambda d: fn(x(d)))
    # gelu's erf tail: both sides carry float32 cancellation there
    _close(lambda d: F.gelu(x(d)))
    y = lambda d: torch.tensor([[[0.9634]]], device=d).to(dtype)  # noqa: E731
    _both(lambda d: torch.addcdiv(torch.tensor(-1, device=d), torch.tensor(True, device=d), y(d)))
    _both(lambda d: torch.addcmul(y(d), y(d), torch.tensor([3.3, -1.1], dtype=dtype, device=d), value=0.1))


def test_logit_of_integers_and_half():
    _both(lambda d: torch.full((3,), 6, dtype=torch.uint8, device=d).logit())
    _both(lambda d: torch.logit(torch.tensor([[1]], dtype=torch.uint8, device=d), eps=1e-06))
    for dtype in (torch.float16, torch.bfloat16):
        for eps in (None, 0.1):
            _both(lambda d: torch.logit(torch.linspace(-0.2, 1.2, 57).to(dtype).to(d), eps))


def test_lgamma_is_zero_at_one_and_two():
    _both(lambda d: torch.lgamma(torch.tensor([1.0, 2.0], device=d)))
    _both(lambda d: -3 / torch.lgamma(torch.tensor([0.0, 1.0], dtype=torch.bfloat16, device=d)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_median_of_nothing_is_nan(dtype):
    _both(lambda d: torch.zeros((1, 0, 2), dtype=dtype, device=d).median())
    _both(lambda d: torch.zeros((0,), dtype=dtype, device=d).nanmedian())


def test_celu_keeps_negative_zero():
    _both(lambda d: torch.nn.functional.celu(torch.tensor([0.0, -0.0, -2.0, 3.0], device=d), alpha=0.5).signbit())
    _both(lambda d: torch.nn.functional.celu(torch.tensor([0.0, -0.0, -2.0, 3.0], device=d), alpha=0.5))
