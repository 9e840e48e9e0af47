"""The scatters and backwards of views (select, slice) and the masked softmax
of attention, against eager on the CPU: each is one rule, so odd bounds,
negative dims and indices, steps, dtypes and gradients are checked here."""
import copy

import pytest
import torch

import torch_xla

DEV = torch_xla.device()
aten = torch.ops.aten


def _same(fn, *args):
    want = fn(*args)
    got = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("dim,index", [(0, 0), (1, -1), (-1, 2), (-3, 1)])
def test_select_scatter_and_backward(dim, index):
    x = torch.randn(3, 4, 5)
    src = torch.randn(x.select(dim, index).shape)
    _same(lambda a, b: aten.select_scatter.default(a, b, dim, index), x, src)
    _same(lambda g: aten.select_backward.default(g, list(x.shape), dim, index), src)


@pytest.mark.parametrize("dim,start,end,step", [
    (0, 0, 2, 1), (1, 1, None, 2), (-1, -3, -1, 1), (2, None, 100, 3), (1, -100, 2, 1), (0, 2, 1, 1)])
def test_slice_scatter_and_backward(dim, start, end, step):
    x = torch.randn(4, 6, 7)
    src = torch.randn(x[(slice(None),) * (dim % 3) + (slice(start, end, step),)].shape)
    _same(lambda a, b: aten.slice_scatter.default(a, b, dim, start, end, step), x, src)
    _same(lambda g: aten.slice_backward.default(g, list(x.shape), dim, 0 if start is None else start,
                                                 2 ** 62 if end is None else end, step), src)


def test_scatters_in_bf16_and_int():
    x = torch.randn(3, 4).to(torch.bfloat16)
    _same(lambda a, b: aten.slice_scatter.default(a, b, 1, 1, 3), x, torch.randn(3, 2).to(torch.bfloat16))
    xi = torch.arange(12).reshape(3, 4)
    _same(lambda a, b: aten.select_scatter.default(a, b, 0, 1), xi, torch.tensor([7, 8, 9, 10]))


def test_gradients_through_select_and_slice():
    x = torch.randn(4, 6)

    def grads(t):
        t = t.clone().requires_grad_()
        (t[1] * 2).sum().backward(retain_graph=True)
        (t[:, 1:5:2] ** 2).sum().backward()
        return t.grad
    torch.testing.assert_close(grads(x.to(DEV)).cpu(), grads(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_safe_softmax_gives_zero_for_fully_masked_rows(dtype):
    x = torch.randn(2, 3, 5).to(dtype)
    x[0, 1] = float("-inf")          # a whole row masked: 0, where softmax is nan
    x[1, 2, :3] = float("-inf")      # part of a row: an ordinary softmax
    for dim in (-1, 1):
        _same(lambda a: aten._safe_softmax.default(a, dim), x)
    _same(lambda a: aten._safe_softmax.default(a, -1, torch.float32), x)
    _same(lambda a: aten._safe_softmax.default(a, 0), torch.tensor(float("-inf")))


def test_attention_with_a_fully_masked_query_trains_like_eager():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[2] = True                   # query 2 may attend to nothing

    def run(m, t, k):
        out, _ = m(t, t, t, attn_mask=k)
        out.nan_to_num().sum().backward()
        return out.detach().cpu(), m.in_proj_weight.grad.cpu()
    want = run(copy.deepcopy(mha), x, mask)
    got = run(mha.to(DEV), x.to(DEV), mask.to(DEV))
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True, atol=1e-5, rtol=1e-5)
