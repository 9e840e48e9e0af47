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
