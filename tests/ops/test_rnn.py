"""LSTM and GRU (PyTorch's fused cells on non-CPU devices) match eager CPU, forward and backward."""
import copy

import pytest
import torch

import torch_xla


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_matches_cpu(kind, bias):
    dev = torch_xla.device()
    torch.manual_seed(0)
    rnn = getattr(torch.nn, kind)(6, 8, num_layers=1, batch_first=True, bias=bias)
    xrnn = copy.deepcopy(rnn).to(dev)
    x = torch.randn(2, 3, 6)
    out, _ = rnn(x)
    xout, _ = xrnn(x.to(dev))
    torch.testing.assert_close(xout.cpu(), out, rtol=1e-4, atol=1e-5)
    out.pow(2).sum().backward()
    xout.pow(2).sum().backward()
    for p, xp in zip(rnn.parameters(), xrnn.parameters()):
        torch.testing.assert_close(xp.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
