"""Views at barriers: a live view whose value comes from pending work is
computed beside its base (as upstream syncs every live tensor), and a host read
of a view written in place hands back its base too, so later graphs read data
instead of re-running the view chain or the write."""
import torch

import torch_xla
import torch_xla.debug.metrics as met


def _graph_text(t):
    return torch_xla._XLAC._get_xla_tensors_text([t])


def test_a_live_view_is_data_after_the_barrier(dev):
    cpu = torch.arange(12.0)
    base = cpu.to(dev) * 2
    view = base[1::3]
    torch_xla.sync()
    text = _graph_text(view + 1)
    assert "slice" not in text and "device_data" in text
    torch.testing.assert_close((view + 1).cpu(), cpu[1::3] * 2 + 1)


def test_graphs_on_a_synced_view_do_not_depend_on_its_layout(dev):
    # a strided and a contiguous input of the same shape key the same graph after a barrier
    # (the first graph may already be cached by another test; the second must be)
    for step in (2, 1):
        base = torch.randn(8, device=dev)
        x = base[::step][:4]
        torch_xla.sync()
        met.clear_all()
        (x * 3).sum().cpu()
    assert (met.counter_value("UncachedCompile") or 0) == 0
    assert met.counter_value("CachedCompile") == 1


def test_views_stay_aliases_after_the_barrier(dev):
    cpu = torch.arange(12.0).reshape(3, 4)
    base = cpu.to(dev) + 0
    row = base[1]
    torch_xla.sync()
    base.mul_(10)           # the base changes: the view follows
    cpu = cpu * 10
    torch.testing.assert_close(row.cpu(), cpu[1])
    row.add_(1)             # the view changes: the base follows
    cpu[1] += 1
    torch_xla.sync()
    torch.testing.assert_close(base.cpu(), cpu)
    torch.testing.assert_close(row.cpu(), cpu[1])


def test_reading_a_view_written_in_place_leaves_no_pending_write(dev):
    x = torch.randn(6, device=dev)
    torch_xla.sync()
    ref = x.clone().view(-1)
    ref.index_add_(0, torch.tensor([0, 2], device=dev), torch.ones(2, device=dev))
    want = x.cpu().clone()
    want[[0, 2]] += 1
    # computed from the view on the device, as torch.testing compares two XLA tensors
    torch.testing.assert_close((ref.view(2, 3) + 0).cpu(), want.view(2, 3))
    met.clear_all()
    torch_xla.sync()        # the clone's scatter-back ran with the read
    assert met.metric_data("ExecuteTime") is None
    torch.testing.assert_close(ref.cpu(), want)


def test_a_view_written_in_place_is_data_after_the_barrier(dev):
    base = torch.arange(12.0).to(dev).reshape(3, 4)
    view = base.t()
    torch_xla.sync()                      # the view is data now
    view.add_(1)                          # the view holds the add, the base its scatter back
    torch_xla.sync()
    text = _graph_text(view + 1)
    assert "aten::t(" not in text and "aten::view(" not in text and "device_data" in text
    torch.testing.assert_close(view.cpu(), torch.arange(12.0).reshape(3, 4).t() + 1)


def test_gradient_accumulation_into_a_view_settles_on_one_graph(dev):
    # Linear's weight gradient is a view (the transpose of a matmul); steps after the
    # first accumulate into it in place. Upstream's test_grad_accum: two graphs in all
    torch.manual_seed(0)
    cpu = torch.nn.Linear(16, 4, bias=False)
    xla = torch.nn.Linear(16, 4, bias=False).to(dev)
    xla.load_state_dict(cpu.state_dict())
    x = torch.rand(2, 16)
    xd = x.to(dev)
    met.clear_all()
    for _ in range(4):
        cpu(x).square().sum().backward()
        xla(xd).square().sum().backward()
        torch_xla.sync()
    torch.testing.assert_close(xla.weight.grad.cpu(), cpu.weight.grad)
    compiled = met.counter_value("UncachedCompile") or 0
    cached = met.counter_value("CachedCompile") or 0
    assert compiled + cached >= 4 and compiled <= 2, (compiled, cached)
    assert met.metric_data("ExecuteTime")[0] >= 4


def test_a_parameter_updated_in_place_is_one_output_of_the_step(dev, monkeypatch):
    # parameters moved by .to() alias a base whole; computing the alias as a second
    # output made XLA copy every updated parameter (and gradient) once more per step
    from torch_xla.engine.lazy import executor
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(2, 3, 3)
    xla = torch.nn.Conv2d(2, 3, 3).to(dev)
    xla.load_state_dict(cpu.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu, xla)]
    x = torch.randn(2, 2, 6, 6)
    xd = x.to(dev)
    roots = []
    run = executor.run
    monkeypatch.setattr(executor, "run", lambda values, *a, **k: roots.append(len(values)) or run(values, *a, **k))
    for _ in range(3):
        for m, opt, inp in ((cpu, opts[0], x), (xla, opts[1], xd)):
            opt.zero_grad()
            m(inp).square().sum().backward()
            opt.step()
        torch_xla.sync()
    # weight, bias, their momentum buffers and their gradients: 6 values, each once
    assert roots[-1] == 6, roots
    for p, q in zip(cpu.parameters(), xla.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4)
        assert "device_data" in _graph_text(q + 1) and "aten::view" not in _graph_text(q + 1)
