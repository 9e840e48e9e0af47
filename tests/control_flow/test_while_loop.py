"""fori_loop / while_loop: one lax.while_loop node, same values as the Python loop."""
import re

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.experimental.fori_loop import fori_loop, while_loop
from torch._higher_order_ops.while_loop import while_loop_op


def _whiles(tensors):
    return len(re.findall(r"\swhile\(", torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))))


def test_while_loop_counts_down(dev):
    i = torch.tensor(10, device=dev)
    x = torch.tensor(3, dtype=torch.int32, device=dev)
    i2, x2 = while_loop(lambda i, x: i > 0, lambda i, x: (i - 1, x + 2), (i, x))
    assert _whiles([i2, x2]) == 1
    assert i2.item() == 0 and x2.item() == 23 and x2.dtype == torch.int32


def test_while_loop_closed_over_linear_matches_unrolled(dev):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4)
    with torch.no_grad():
        want = x
        for _ in range(6):
            want = torch.tanh(lin(want))
        xl = lin.to(dev)
        n, got = while_loop(lambda n, h: n < 6, lambda n, h: (n + 1, torch.tanh(xl(h))),
                            (torch.tensor(0, device=dev), x.to(dev)))
    assert n.item() == 6
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_while_loop_data_dependent_trip_count(dev):
    # runs until the value passes a threshold: the trip count is decided on the device
    x = torch.tensor([1.0, 2.0], device=dev)
    steps, y = while_loop(lambda s, v: v.sum() < 100, lambda s, v: (s + 1, v * 1.5),
                          (torch.tensor(0, device=dev), x))
    s, v = 0, torch.tensor([1.0, 2.0])
    while v.sum() < 100:
        s, v = s + 1, v * 1.5
    assert steps.item() == s
    torch.testing.assert_close(y.cpu(), v)


def test_fori_loop(dev):
    a = torch.ones(3, device=dev)
    b = torch.arange(3.0, device=dev)
    left, a2, b2 = fori_loop(2, 7, lambda a, b: (a + b, b * 2), a, b)
    ea, eb = torch.ones(3), torch.arange(3.0)
    for _ in range(5):
        ea, eb = ea + eb, eb * 2
    assert left.item() == 0
    torch.testing.assert_close(a2.cpu(), ea)
    torch.testing.assert_close(b2.cpu(), eb)
    # tensor bounds, single value
    _, c = fori_loop(torch.tensor(0, device=dev), torch.tensor(4, device=dev), lambda c: c * 3,
                     torch.ones(2, device=dev))
    torch.testing.assert_close(c.cpu(), torch.full((2,), 81.0))


def test_higher_order_op_on_xla_tensors(dev):
    # torch's while_loop higher-order op dispatches XLA tensors to the loop node
    out = while_loop_op(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2),
                        (torch.tensor(0, device=dev), torch.ones(2, device=dev)), ())
    assert out[0].item() == 5
    torch.testing.assert_close(out[1].cpu(), torch.full((2,), 32.0))


def test_while_loop_errors(dev):
    with pytest.raises(ValueError, match="0-dim"):
        while_loop(lambda x: x > 0, lambda x: x - 1, (torch.ones(2, device=dev),))
    with pytest.raises(ValueError, match="shapes"):
        while_loop(lambda x: x.sum() > 0, lambda x: x[:1], (torch.ones(2, device=dev),))
    xm.mark_step()
