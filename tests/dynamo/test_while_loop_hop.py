"""torch._higher_order_ops.while_loop on XLA tensors, with no torch_xla import
of its own: the call compiles through Dynamo and lands in the engine's loop node."""
import torch
from torch._higher_order_ops.while_loop import while_loop

import torch_xla.debug.metrics as met


def test_while_loop_hop_matches_python_loop(dev):
    w = torch.randn(4, 4) * 0.3

    def cond_fn(i, x):
        return i > 0

    def body_fn(i, x):
        return i - 1, torch.tanh(x @ wx) + 1

    wx = w.to(dev)
    i, x = torch.tensor(6), torch.randn(2, 4)
    _, got = while_loop(cond_fn, body_fn, (i.to(dev), x.to(dev)))
    want = x
    for _ in range(6):
        want = torch.tanh(want @ w) + 1
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert (met.counter_value("xla::while_loop") or 0) >= 1
