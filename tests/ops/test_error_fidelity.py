"""Errors and warnings as eager PyTorch gives them, for inputs users get wrong."""
import warnings

import pytest
import torch


def test_a_float_index_is_an_index_error(dev):
    x = torch.arange(5.0, device=dev)
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        x[torch.tensor([1.0], device=dev)]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        x.index_put_((torch.tensor([1.0], device=dev),), torch.tensor(2.0, device=dev))
    assert x[torch.tensor([1, 3], device=dev)].cpu().tolist() == [1.0, 3.0]


@pytest.mark.parametrize("op", ["max", "min"])
def test_full_max_of_nothing_says_what_eager_says(dev, op):
    with pytest.raises(RuntimeError) as eager:
        getattr(torch.empty(0), op)()
    with pytest.raises(RuntimeError) as ours:
        getattr(torch.empty(0, device=dev), op)()
    assert str(ours.value).startswith(str(eager.value))


def test_sparse_tensors_are_refused_by_name(dev):
    with pytest.raises(RuntimeError, match="sparse tensors are not supported on the XLA device"):
        torch.eye(3).to_sparse().to(dev)


def test_complex_to_real_keeps_the_real_part_without_a_jax_warning(dev):
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        got = z.to(dev).to(torch.float32).cpu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = z.to(torch.float32)
    assert got.tolist() == want.tolist() == [1.0, 3.0]
