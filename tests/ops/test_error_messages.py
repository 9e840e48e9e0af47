"""Bad arguments raise RuntimeError with upstream's message (ops/checks.py); the
user's line travels with it as a note. Calls that PyTorch's meta kernels accept
but eager refuses (random_, uniform_ with an empty range) raise too, instead of
returning numbers from a range that does not exist."""
import sys
import traceback

import pytest
import torch

import torch_xla


@pytest.fixture
def dev():
    return torch_xla.device()


def _raises(fn, expect):
    with pytest.raises(RuntimeError) as err:
        fn()
    assert str(err.value) == expect
    return err.value


CASES = [
    (lambda d: torch.mm(torch.rand(2, 5, device=d), torch.rand(8, 2, device=d)),
     "mm(): cannot matrix-multiply tensors f32[2,5] and f32[8,2]. Expected the size of dimension 1 "
     "of the first input tensor (5) to be equal the size of dimension 0 of the second input tensor (8)."),
    (lambda d: torch.mm(torch.rand(2, 2, 2, device=d), torch.rand(2, 2, device=d)),
     "mm(): expected the first input tensor f32[2,2,2] to be a matrix (i.e. a 2D tensor)."),
    (lambda d: torch.bmm(torch.rand(2, 3, 8, device=d), torch.rand(2, 4, 3, device=d)),
     "bmm(): cannot apply batch matrix-multiplication to `input` f32[2,3,8], the 1st input tensor, "
     "and to `mat2` f32[2,4,3], the 2nd input tensor. Expected the size of dimension 2 of `input` (8) "
     "to be equal the size of dimension 1 of `mat2` (4)."),
    (lambda d: torch.flip(torch.rand(2, 2, 2, device=d), dims=[0, 0, -1, 2]),
     "flip(): expected each dimension to appear at most once. Found dimensions: 0 (2 times), "
     "2 (2 times). Consider changing dims from [0, 0, -1, 2] to [0, 2]."),
    (lambda d: torch.roll(torch.rand(2, 2, device=d), [1, 1], [0]),
     "roll(): expected `dims` [0] (size=1) to match the size of `shifts` [1, 1] (size=2)."),
    (lambda d: torch.rand(1, 2, 3, device=d).expand([1, 4, 3]),
     "expand(): expected dimension 1 of the given `sizes` [1, 4, 3] (4) to be -1, or equal to the "
     "size of the `input` tensor f32[1,2,3] at dimension 1 (2)."),
    (lambda d: torch.full([2, -1], 0.5, device=d),
     "full(): expected concrete sizes (i.e. non-symbolic) to be positive values. However found "
     "negative ones: [2, -1]."),
    (lambda d: torch.add(torch.rand(3, 4, device=d), torch.rand(5, device=d)),
     "Shapes are not compatible for broadcasting: f32[3,4] vs. f32[5]. Expected dimension 1 of shape "
     "f32[3,4] (4) to match dimension 0 of shape f32[5] (5). Either that or that any of them is "
     "either 1 or unbounded. Try reshaping one of the tensors to match the other."),
    (lambda d: torch.cat([torch.rand(2, 2, device=d), torch.rand(5, 1, device=d)]),
     "cat(): cannot concatenate tensors of shape f32[5,1] with f32[2,2] at dimension 0. Expected "
     "shapes to be equal (except at dimension 0) or that either of them was a 1D empty tensor of "
     "size (0,)."),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_bad_arguments_raise_upstreams_message(dev, i):
    fn, expect = CASES[i]
    err = _raises(lambda: fn(dev), expect)
    if sys.version_info >= (3, 11):
        printed = "".join(traceback.format_exception(err))
        assert "test_error_messages.py" in printed and "[torch_xla] while tracing aten::" in printed


def test_random_and_uniform_with_an_empty_range_raise(dev):
    # eager refuses these; the meta kernels do not, so without a check they
    # would quietly draw numbers
    with pytest.raises(RuntimeError):
        torch.empty(4).random_(3, 1)
    _raises(lambda: torch.empty(4, device=dev).random_(3, 1),
            "random_(): expected `from` (3) to be smaller than `to` (1).")
    _raises(lambda: torch.empty(4, device=dev, dtype=torch.float16).random_(0, 70000),
            "random_(): expected `to` to be within the range [-65504, 65504]. However got value "
            "69999, which is greater than the upper bound.")
    _raises(lambda: torch.empty(4, device=dev).uniform_(5, 2),
            "uniform_(): expected `from` (5) <= `to` (2).")


def test_valid_calls_are_untouched(dev):
    x = torch.empty(1000, device=dev).random_(3, 7)
    assert 3 <= int(x.min()) and int(x.max()) <= 6
    u = torch.empty(1000, device=dev).uniform_(2, 2.5)
    assert 2 <= float(u.min()) and float(u.max()) <= 2.5
    a = torch.rand(2, 3, device=dev)
    torch.testing.assert_close(torch.mm(a, a.t()).cpu(), torch.mm(a.cpu(), a.cpu().t()))


def test_an_output_no_device_can_hold_raises_at_trace_time(dev):
    # XLA would fuse rand(...).sum() into a loop over 2**50 elements that never
    # allocates them: it has to fail before compiling, not run for hours
    with pytest.raises(RuntimeError, match="Out of memory allocating 4503599627370496 bytes"):
        torch.rand(1024, 1024, 1024, 1024, 1024, device=dev).sum().cpu()
    # a view of that size allocates nothing and stays allowed
    v = torch.zeros(1, device=dev).expand(2 ** 25, 2 ** 25)
    assert v.shape == (2 ** 25, 2 ** 25)


def test_a_bad_dimension_is_both_index_error_and_runtime_error(dev):
    x = torch.zeros(2, 2, 2, device=dev)
    for exc in (IndexError, RuntimeError):
        with pytest.raises(exc):
            x.flip(0, 1, 2, 3)
    with pytest.raises(RuntimeError, match="unsupported range"):
        torch.arange(-5, float("nan"), device=dev)


def test_indexing_that_selects_nothing_checks_no_index(dev):
    # eager reads no element, so out-of-range indices go unnoticed; so here
    x = torch.rand(10, 0, 10, 10)
    i0 = torch.randint(0, 100, (5, 0, 5))
    i1 = torch.randint(0, 100, (5, 1, 1))
    got = x.to(dev)[:, i0.to(dev), :, i1.to(dev)]
    assert got.cpu().shape == x[:, i0, :, i1].shape

