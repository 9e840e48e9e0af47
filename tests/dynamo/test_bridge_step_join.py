"""When a compiled graph stops running each call at once and joins the step graph:
only after a full barrier ran pending work that read what the step's calls
returned (an optimizer reading gradients), not after a barrier of unrelated work."""
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm


def _pending(t):
    return torch_xla._XLAC._check_tensor_need_materialization([t])[0]


def _compiled_linear(dev):
    """A linear layer, its openxla-compiled twin and an input, all on the device."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(dev)
    f = torch.compile(model, backend="openxla")
    x = torch.randn(2, 8).to(dev)
    xm.mark_step()
    return model, f, x


def test_unrelated_barrier_keeps_calls_running_at_once(dev):
    model, f, x = _compiled_linear(dev)
    out = f(x)
    assert not _pending(out)   # ran at once
    other = torch.randn(3, device=dev) * 2   # lazy work that does not read `out`
    xm.mark_step()
    out2 = f(x)
    assert not _pending(out2), "a barrier of unrelated work made the graph join the step graph"
    torch.testing.assert_close(out2.cpu(), model(x).cpu())
    assert other.cpu().shape == (3,)


def test_barrier_reading_the_outputs_makes_the_graph_join(dev):
    model, f, x = _compiled_linear(dev)
    total = torch.zeros(4, device=dev)
    expected = torch.zeros(4)
    for step in range(3):
        out = f(x)
        # the first call runs at once; once a barrier read its outputs, later
        # calls are nodes of the step graph, computed at the barrier
        assert _pending(out) == (step > 0), step
        total = total + out.sum(0)   # read by the barrier below
        expected = expected + model(x).detach().cpu().sum(0)
        xm.mark_step()
    torch.testing.assert_close(total.cpu(), expected, rtol=1e-5, atol=1e-5)
