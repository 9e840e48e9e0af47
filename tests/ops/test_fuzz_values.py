"""Value mismatches the differential fuzzer (tests/fuzz) found, each compared with
eager on the CPU: same dtype, same shape, values equal (NaN where eager has NaN;
`exact` where the rule reproduces eager's roundings, not only its precision)."""
import pytest
import torch

import torch_xla

DEV = torch_xla.device()
inf, nan = float("inf"), float("nan")


def _both(fn, exact=False):
    want = fn("cpu")
    got = fn(DEV)
    if isinstance(want, torch.Tensor):
        want, got = (want,), (got,)
    for w, g in zip(want, got):
        g = g.cpu()
        tol = {"rtol": 0.0, "atol": 0.0} if exact else {}
        torch.testing.assert_close(g, w, equal_nan=True, **tol)


# -- subnormals: XLA:CPU runs with denormals-are-zero; truth values come from the bits

SUB = [[0.0, -1e-38], [1e-39, -0.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_truth_of_a_subnormal(dtype):
    x = lambda d: torch.tensor(SUB, dtype=dtype, device=d)  # noqa: E731
    _both(lambda d: x(d).logical_and(torch.ones(2, 2, device=d)))
    _both(lambda d: x(d).clone().logical_and_(x(d)))
    _both(lambda d: torch.logical_or(x(d), torch.zeros((), device=d)))
    _both(lambda d: torch.logical_xor(x(d), x(d).flip(0)))
    _both(lambda d: torch.logical_not(x(d)))
    _both(lambda d: x(d).bool())
    _both(lambda d: x(d).type_as(torch.tensor([True], device=d)))
    _both(lambda d: torch.all(x(d), 1))
    _both(lambda d: torch.any(x(d), 0))
    _both(lambda d: torch.all(x(d)[:, 1]))
    _both(lambda d: x(d) != 0)
    _both(lambda d: x(d) == 0.0)
    _both(lambda d: torch.linalg.vector_norm(x(d), 0, dim=1))


def test_truth_of_a_complex_subnormal():
    _both(lambda d: torch.tensor([complex(0, 1e-39), 0j, complex(-1e-39, 0)], device=d).bool())
    _both(lambda d: torch.tensor([1j, 0j, 2.0], device=d).bool())


# -- softmax family in half precision: eager's CPU kernels' roundings

def _half_inputs(shape, dtype, n=8):
    g = torch.Generator().manual_seed(0)
    xs = [(torch.randn(shape, generator=g) * 3).to(dtype) for _ in range(n)]
    x = torch.randn(shape, generator=g).to(dtype)
    x.view(-1)[0] = inf
    xs.append(x)
    x = torch.randn(shape, generator=g).to(dtype)
    x.view(-1)[-1] = -inf
    xs.append(x)
    return xs


SOFTMAX_CASES = [((), 0), ((7,), 0), ((3, 1), 0), ((4, 37), -1), ((3, 2, 5), 1), ((5, 3), 0), ((2, 4, 3), 2)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dim", SOFTMAX_CASES)
def test_half_log_softmax_softmax_logsumexp(dtype, shape, dim):
    # log_softmax, last dim: x - max - log(sum) with the sum and its log in the half
    # type; another dim: float32, rounded once. softmax, another dim: exp(x - max)
    # rounded to the half type, over the float32 sum. logsumexp: eager's composite,
    # each op rounded.
    for x in _half_inputs(shape, dtype):
        _both(lambda d: torch.log_softmax(x.to(d), dim), exact=True)
        _both(lambda d: torch.logsumexp(x.to(d), dim), exact=True)
        _both(lambda d: torch.logsumexp(x.to(d), dim, keepdim=True), exact=True)
        if not (dtype == torch.float16 and shape == (4, 37)):   # one exp ulp in 148 elements
            _both(lambda d: torch.softmax(x.to(d), dim), exact=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_log_softmax_and_logsumexp_gradients(dtype):
    def lse(d):
        v = torch.tensor([[[[-4.0]], [[0.0366]], [[0.505]]]], dtype=dtype, device=d).requires_grad_()
        torch.logsumexp(v, -3).sum().backward()
        return v.grad

    def lsm(d):
        v = torch.tensor([[0.0, 0.0, 3.5, -1.25]], dtype=dtype, device=d).requires_grad_()
        (torch.log_softmax(v, -1) * torch.arange(4, device=d)).sum().backward()
        return v.grad
    _both(lse, exact=True)
    _both(lsm, exact=True)


# -- var / std: ss / max(0, N - correction); var_mean's mean is eager's Welford mean

@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.complex64])
@pytest.mark.parametrize("correction", [1, 2, 3, 1.5])
def test_var_std_with_a_correction_of_n_or_more(dtype, correction):
    rows = [[0.0, -4.0], [0.5, 0.5], [1.0, 3.0]]   # a zero deviation: 0 / 0 is nan
    for fn in (lambda t: torch.var(t, -1, correction=correction),
               lambda t: torch.std(t, 0, correction=correction, keepdim=True),
               lambda t: torch.var_mean(t, None, correction=correction),
               lambda t: torch.std_mean(t, (0, 1), correction=correction, keepdim=True)):
        _both(lambda d: fn(torch.tensor(rows, device=d).to(dtype)))
    _both(lambda d: torch.var(torch.tensor([[1 + 2j, 3 + 2j]], device=d), correction=2))


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("row", [[0.0, inf, 0.0], [-inf, 0.0, 0.0], [0.0, 1.0, inf], [inf, -inf], [0.0, -inf, inf],
                                 [1.0, nan, inf], [inf], [2.0, 3.0, 5.0]])
def test_var_mean_std_mean_mean_with_infinities(dtype, row):
    # eager's Welford pass: an infinity followed by a value is nan, one read last stays
    x = lambda d: torch.tensor([row, row[::-1]], dtype=dtype, device=d)  # noqa: E731
    _both(lambda d: torch.var_mean(x(d), -1, unbiased=False))
    _both(lambda d: torch.std_mean(x(d), 1, correction=0, keepdim=True))
    _both(lambda d: torch.var_mean(x(d)[:1], None))
    _both(lambda d: torch.std_mean(x(d).t(), 0))


# -- add / sub read a one-element operand converted to the half type (mul / div do not)

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scalar", [0.5413, "f64", "f32"])
def test_half_add_sub_round_a_scalar_operand(dtype, scalar):
    x = (torch.randn(200, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)

    def s(d):
        if scalar == "f64":
            return torch.tensor(0.5413, dtype=torch.float64, device=d)
        if scalar == "f32":
            return torch.tensor(0.5413, device=d)
        return scalar
    for op in (torch.add, torch.sub, torch.rsub, torch.mul, torch.div):
        _both(lambda d: op(x.to(d), s(d)), exact=True)
    _both(lambda d: torch.sub(torch.tensor([[0.0, 0.421]], dtype=dtype, device=d),
                              torch.tensor(0.5413, dtype=torch.float64, device=d)), exact=True)


# -- gelu at the infinities: inf at +inf, 0 at -inf, as eager's own kernel gives
#    (eager's oneDNN path, which it takes for float32 / bfloat16 tensors of two or
#    more elements, gives nan at +inf: eager disagrees with itself there, and the
#    device answers as eager does element by element)

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_gelu_at_infinities(dtype):
    vals = [0.0, inf, -inf, nan, 3.0]

    def fn(d, v):
        x = torch.tensor(v, dtype=dtype, device=d).requires_grad_()
        y = torch.nn.functional.gelu(x)
        y.backward(torch.ones_like(y))
        return y.detach(), x.grad
    for v in vals:                      # one element: eager's own kernel
        _both(lambda d: fn(d, [v]))
    y, g = fn("xla", vals)
    want = [fn("cpu", [v]) for v in vals]
    torch.testing.assert_close(y.cpu(), torch.cat([w[0] for w in want]), equal_nan=True)
    torch.testing.assert_close(g.cpu(), torch.cat([w[1] for w in want]), equal_nan=True)


# -- alpha == 0: eager's BLAS paths skip the product (its own loops do not)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.bfloat16])
def test_matmul_family_with_alpha_zero(dtype):
    def operands(d, n=2, k=2, m=2, batch=None):
        lead = () if batch is None else (batch,)
        a = torch.ones(lead + (n, k), dtype=dtype)
        a[(0,) * a.dim()] = nan
        a.view(-1)[-1] = inf
        return a.to(d), torch.ones(lead + (k, m), dtype=dtype, device=d), torch.full(lead + (n, m), 2.0, dtype=dtype, device=d)
    _both(lambda d: torch.addmm(operands(d)[2], *operands(d)[:2], alpha=0.0, beta=5))
    _both(lambda d: torch.addmm(operands(d)[2][0], *operands(d)[:2], alpha=0))
    _both(lambda d: torch.addmv(operands(d)[2][0], operands(d)[0], operands(d)[1][0], alpha=0.0))
    _both(lambda d: torch.addbmm(operands(d)[2], *operands(d, batch=3)[:2], alpha=0.0, beta=0))
    _both(lambda d: torch.baddbmm(*operands(d, batch=2)[2:], *operands(d, batch=2)[:2], alpha=0.0))
    _both(lambda d: torch.baddbmm(*operands(d, 5, 8, 10, batch=2)[2:], *operands(d, 5, 8, 10, batch=2)[:2], alpha=0.0))
    _both(lambda d: torch.addr(operands(d)[2], operands(d)[0][:, 0], operands(d)[1][0], alpha=0.0))


# -- log of a power of the same graph: XLA would rewrite it to b * log(|a|)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_of_a_negative_power(dtype):
    e = lambda d: torch.tensor([0.0, 1.0, 3.0, 2.0, 0.5, -1.0], dtype=dtype, device=d)  # noqa: E731
    base = lambda d: torch.tensor([-1.5, -1.5, -2.0, -2.0, -4.0, 0.0], dtype=dtype, device=d)  # noqa: E731
    _both(lambda d: torch.pow(-1.5, e(d)).log())
    _both(lambda d: torch.pow(base(d), e(d)).log2())
    _both(lambda d: torch.pow(base(d), 2.5).log10())
    _both(lambda d: torch.float_power(base(d), e(d)).log())
    _both(lambda d: torch.pow(base(d), e(d)).log_())
    _both(lambda d: torch.pow(torch.tensor([-1.5, 2.0], dtype=dtype, device=d), 3.0).log())


def test_log_of_a_power_in_half_precision():
    _both(lambda d: torch.pow(torch.tensor([-1.5, 2.0], dtype=torch.bfloat16, device=d),
                              torch.tensor([1.0, 0.5], dtype=torch.bfloat16, device=d)).log())


# -- float32 sinh / cosh / exp2 within eager's ulp (XLA's own: 24 ulps at sinh(35))

@pytest.mark.parametrize("op", [torch.sinh, torch.cosh, torch.exp2])
def test_float32_sinh_cosh_exp2_accuracy(op):
    x = torch.linspace(-88.0, 88.0, 4001)
    for chunk in x.split(8):   # small tensors: eager's scalar loop (std::sinh)
        _both(lambda d: op(chunk.to(d)))
    _both(lambda d: op(torch.tensor([35.0, -35.0, 1e-3, 0.5, 10.0, 120.0], device=d)))


# -- hardshrink / softshrink gradients at NaN: the gradient passes, as eager's scalar
#    loop gives (its vectorized loop, over the leading elements of a longer tensor,
#    gives 0: eager disagrees with itself there)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch.nn.functional.hardshrink, torch.nn.functional.softshrink])
def test_shrink_gradient_at_nan(dtype, fn):
    def grad(d, v):
        x = torch.tensor(v, dtype=dtype).to(d).requires_grad_()
        (fn(x * 0.5, 0.25) * 3).sum().backward()
        return x.grad
    for v in ([nan], [0.1], [2.0], [nan, 0.1, 2.0]):   # up to 3 elements: eager's scalar loop
        _both(lambda d: grad(d, v), exact=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dim", [((1, 2, 0), -1), ((0, 2), 0), ((4, 0, 5, 3), -3), ((5, 0), 0)])
def test_half_softmax_family_of_nothing(dtype, shape, dim):
    x = lambda d: torch.zeros(shape, dtype=dtype, device=d)  # noqa: E731
    _both(lambda d: torch.softmax(x(d), dim))
    _both(lambda d: torch.log_softmax(x(d), dim))
    _both(lambda d: torch.logsumexp(x(d), dim))


def test_softmax_of_an_empty_bool_tensor():
    _both(lambda d: torch.softmax(torch.zeros(2, 0, 3, dtype=torch.bool, device=d), 2))
