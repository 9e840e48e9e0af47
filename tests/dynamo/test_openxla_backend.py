"""torch.compile(backend="openxla" / "openxla_eval") against eager CPU and the
lazy path: inference outputs, 5 training steps' losses, graph breaks,
recompilation only for new shapes, in-place buffers, dropout."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from nets import GPT, MNIST, BasicBlock

torch._dynamo.config.cache_size_limit = 64


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _count(name):
    return met.counter_value(name) or 0


def test_mlp_inference_replays_one_executable(dev):
    torch.manual_seed(0)
    cpu = _mlp()
    model = copy.deepcopy(cpu).to(dev)
    f = torch.compile(model, backend="openxla_eval")
    for _ in range(4):
        x = torch.randn(8, 16)
        torch.testing.assert_close(f(x.to(dev)).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    assert _count("DynamoExtractCompiledGraph") == 1
    assert _count("DynamoTracedGraph") == 1
    assert _count("DynamoGraphNode") == 4
    assert _count("UncachedCompile") == 1


def test_new_shape_compiles_once_and_stays_cached(dev):
    torch.manual_seed(0)
    cpu = _mlp()
    model = copy.deepcopy(cpu).to(dev)
    f = torch.compile(model, backend="openxla_eval", dynamic=False)
    shapes = [5, 5, 7, 7, 5, 7]
    for b in shapes:
        x = torch.randn(b, 16)
        torch.testing.assert_close(f(x.to(dev)).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    assert _count("UncachedCompile") == 2
    assert _count("DynamoGraphNode") == 6


def test_mark_dynamic_accepted(dev):
    torch.manual_seed(0)
    cpu = _mlp()
    model = copy.deepcopy(cpu).to(dev)
    f = torch.compile(model, backend="openxla_eval")
    for b in [4, 6, 4, 6]:
        x = torch.randn(b, 16)
        xd = x.to(dev)
        torch._dynamo.mark_dynamic(xd, 0)
        torch.testing.assert_close(f(xd).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    assert _count("UncachedCompile") == 2   # one executable per concrete batch size


def _train(model_fn, batches, loss_fn, mode, steps=5, lr=0.05):
    """Losses of `steps` SGD steps: mode 'cpu', 'lazy' or 'dynamo'."""
    torch.manual_seed(0)
    model = model_fn()
    dev = torch.device("cpu") if mode == "cpu" else torch_xla.device()
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    step_fn = lambda *d: loss_fn(model, *d)  # noqa: E731
    if mode == "dynamo":
        step_fn = torch.compile(step_fn, backend="openxla")
    losses = []
    for s in range(steps):
        data = [d.to(dev) for d in batches[s % len(batches)]]
        opt.zero_grad()
        loss = step_fn(*data)
        loss.backward()
        opt.step()
        if mode != "cpu":
            xm.mark_step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _check_training(model_fn, batches, loss_fn):
    cpu, p_cpu = _train(model_fn, batches, loss_fn, "cpu")
    lazy, _ = _train(model_fn, batches, loss_fn, "lazy")
    met.clear_all()
    dyn, p_dyn = _train(model_fn, batches, loss_fn, "dynamo")
    assert dyn == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert dyn == pytest.approx(lazy, rel=1e-5, abs=1e-6)
    assert dyn[-1] < dyn[0]
    for a, b in zip(p_dyn, p_cpu):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    # forward and backward: traced once each, one node of the step's graph in every step
    assert _count("DynamoTracedGraph") == 2
    assert _count("DynamoGraphNode") == 10


def test_mnist_training_matches_cpu_and_lazy():
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g))]
    _check_training(MNIST, batches, lambda m, x, y: F.nll_loss(m(x), y))


def test_gpt_training_matches_cpu_and_lazy():
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randint(0, 64, (2, 16), generator=g), torch.randint(0, 64, (2, 16), generator=g))]
    _check_training(GPT, batches, lambda m, i, t: m(i, t))


class _TinyLM(nn.Module):
    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.fc = nn.Linear(d, d)

    def forward(self, idx):
        return torch.tanh(self.fc(self.emb(idx))) @ self.emb.weight.t()


def test_backward_replays_when_its_incoming_gradient_is_a_view():
    # the loss reshapes the compiled model's logits outside the compiled region, so
    # the gradient reaching the compiled backward is a view of a (B*T, V) tensor
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randint(0, 32, (4, 8), generator=g), torch.randint(0, 32, (4, 8), generator=g))]

    def loss(m, i, t):
        logits = m(i)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))

    cpu, p_cpu = _train(_TinyLM, batches, loss, "cpu")
    lazy, _ = _train(_TinyLM, batches, loss, "lazy")
    met.clear_all()
    torch.manual_seed(0)
    model = _TinyLM().to(torch_xla.device())
    compiled = torch.compile(model, backend="openxla")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dyn = []
    for _ in range(5):
        i, t = (d.to(torch_xla.device()) for d in batches[0])
        opt.zero_grad()
        logits = compiled(i)
        out = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))
        out.backward()
        opt.step()
        xm.mark_step()
        dyn.append(out.item())
    assert dyn == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert dyn == pytest.approx(lazy, rel=1e-5, abs=1e-6)
    for a, b in zip(model.parameters(), p_cpu):
        torch.testing.assert_close(a.detach().cpu(), b, rtol=1e-4, atol=1e-4)
    assert _count("DynamoTracedGraph") == 2
    assert _count("DynamoGraphNode") == 10
    assert _count("DynamoLazyGraph") == 0


class _ResBlockNet(nn.Module):
    """A ResNet-style block (convolutions, BatchNorm in training mode, shortcut) and a head."""

    def __init__(self):
        super().__init__()
        self.block = BasicBlock(3, 8, 2)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.block(x), 1).flatten(1))


def test_resnet_block_training_matches_cpu_and_lazy():
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g))]
    _check_training(_ResBlockNet, batches, lambda m, x, y: F.cross_entropy(m(x), y))


def test_gpt_inference_matches_cpu(dev):
    torch.manual_seed(0)
    cpu = GPT().eval()
    model = copy.deepcopy(cpu).to(dev)
    f = torch.compile(model, backend="openxla_eval")
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        i, t = torch.randint(0, 64, (1, 16), generator=g), torch.randint(0, 64, (1, 16), generator=g)
        with torch.no_grad():
            torch.testing.assert_close(f(i.to(dev), t.to(dev)).cpu(), cpu(i, t), rtol=1e-5, atol=1e-5)
    assert _count("DynamoGraphNode") == 3


def test_optimizer_step_inside_compiled_region(dev):
    torch.manual_seed(0)
    cpu = _mlp()
    model = copy.deepcopy(cpu).to(dev)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, model)]

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss

    cstep = torch.compile(step, backend="openxla")
    g = torch.Generator().manual_seed(4)
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        lc = step(cpu, opts[0], x, y)
        lx = cstep(model, opts[1], x.to(dev), y.to(dev))
        xm.mark_step()
        assert lx.item() == pytest.approx(lc.item(), rel=1e-5, abs=1e-6)
    for a, b in zip(model.parameters(), cpu.parameters()):
        torch.testing.assert_close(a.cpu(), b.detach(), rtol=1e-5, atol=1e-5)


def test_graph_breaks_print_and_item(dev, capsys):
    torch.manual_seed(0)
    lin1, lin2 = nn.Linear(8, 8), nn.Linear(8, 2)
    xl1, xl2 = copy.deepcopy(lin1).to(dev), copy.deepcopy(lin2).to(dev)

    def fn(a, b, x):
        h = torch.relu(a(x))
        print("between graphs")
        s = h.sum().item()          # a host read: another graph break
        return b(h) * s

    cf = torch.compile(fn, backend="openxla_eval")
    for _ in range(3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(cf(xl1, xl2, x.to(dev)).cpu(), fn(lin1, lin2, x), rtol=1e-4, atol=1e-4)
    assert capsys.readouterr().out.count("between graphs") == 6
    assert _count("DynamoExtractCompiledGraph") >= 2


def test_graph_break_note_names_the_user_line(dev, capsys, monkeypatch):
    monkeypatch.setenv("PT_XLA_DEBUG_LEVEL", "1")
    lin = nn.Linear(4, 4).to(dev)

    def fn(x):
        h = lin(x)
        n = int(h.abs().sum().item() > 0)   # a host read: Dynamo breaks the graph here
        return h * (n + 1)

    x = torch.randn(2, 4)
    out = torch.compile(fn, backend="openxla_eval")(x.to(dev))
    torch.testing.assert_close(out.cpu(), fn(x.to(dev)).cpu())
    text = capsys.readouterr().out
    assert "TorchDynamo graph break at" in text and "test_openxla_backend.py" in text
    assert _count("DynamoGraphBreak") >= 1


def test_inplace_buffer_update_batchnorm(dev):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    model = copy.deepcopy(cpu).to(dev)
    f = torch.compile(model, backend="openxla_eval")
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6)
        with torch.no_grad():
            torch.testing.assert_close(f(x.to(dev)).cpu(), cpu(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model[1].running_mean.cpu(), cpu[1].running_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model[1].running_var.cpu(), cpu[1].running_var, rtol=1e-5, atol=1e-5)
    assert model[1].num_batches_tracked.cpu().item() == 3
    assert _count("DynamoGraphNode") == 3


def test_dropout_draws_new_masks_like_lazy(dev):
    def run(compiled):
        torch_xla.manual_seed(7)
        drop = nn.Dropout(0.5).to(dev)
        f = torch.compile(drop, backend="openxla_eval") if compiled else drop
        x = torch.ones(64, device=dev)
        return [f(x).cpu() for _ in range(3)]

    dyn, lazy = run(True), run(False)
    assert not torch.equal(dyn[1], dyn[2])          # a fresh mask each call
    for d in dyn:
        assert set(d.unique().tolist()) <= {0.0, 2.0}
    assert _count("DynamoGraphNode") == 3
    for d, lz in zip(dyn, lazy):
        torch.testing.assert_close(d, lz)


def test_skip_input_data_check_refuses_pending_inputs(dev):
    from torch_xla._dynamo import config
    f = torch.compile(lambda a: a.cos().sin(), backend="openxla")
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x.to(dev)).cpu(), x.cos().sin())
    config.skip_input_data_check = True
    try:
        y = x.to(dev)
        torch.testing.assert_close(f(y).cpu(), x.cos().sin())   # device data: replays
        with pytest.raises(RuntimeError, match="can not be a pending ir"):
            f(y + 5)
    finally:
        config.skip_input_data_check = False


def test_none_remover_round_trip():
    from torch_xla._dynamo.dynamo_bridge import NoneRemover
    r = NoneRemover()
    assert r.remove_nones(("a", None, "b", None)) == ("a", "b") and r.none_poslist == [1, 3]
    out = ["a", "b"]
    r.add_nones(out)
    assert out == ["a", None, "b", None]


def test_xla_tensor_class_pays_nothing_for_dynamo(dev):
    # Dynamo knows XLA tensors through its builder's type table, not through a class
    # hook that every tensor creation would call
    from torch._dynamo.variables.builder import VariableBuilder
    cls = type(torch.ones(1, device=dev))
    assert type(cls) is type(torch.Tensor)
    assert cls in VariableBuilder._type_dispatch_impl(False)
    assert cls in VariableBuilder._type_dispatch_impl(True)


def test_step_reads_only_captured_views_through_their_base(dev):
    # a step captured with a view in one slot and a plain tensor in another: a
    # later call passing a view in the plain slot must read that view's value,
    # not its (larger) base
    from torch_xla.engine import api
    step, _ = api.capture_step(lambda a, b: [a + b], [torch.arange(8.).to(dev)[:4], torch.ones(4).to(dev)])
    assert step.replayable and list(step.views) == [0]
    a_base, b_base = (torch.arange(8.) * 10).to(dev), torch.arange(12.).to(dev)   # device data
    args = [a_base[:4], b_base[4:8]]
    assert step.accepts(args)
    (out,) = step.run(args)
    torch.testing.assert_close(out.cpu(), torch.arange(4.) * 10 + torch.arange(4., 8.))


def _executions_and_compiles():
    ex, co = met.metric_data("ExecuteTime"), met.metric_data("CompileTime")
    return (ex[0] if ex else 0), (co[0] if co else 0)


def _sgd_step(forward, opt, x, y):
    opt.zero_grad()
    loss = F.mse_loss(forward(x), y)
    loss.backward()
    opt.step()
    return loss


def _sgd_steps(model, x, y, forward=None, step=_sgd_step, barrier=None, steps=6):
    """Six SGD-momentum steps of an MSE loss, each `step(forward, opt, x, y)`
    (forward: the model unless given); -> (loss tensors, (executions, compiles)
    of each step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    forward = model if forward is None else forward
    losses, counts = [], []
    for _ in range(steps):
        before = _executions_and_compiles()
        losses.append(step(forward, opt, x, y))
        if barrier is not None:
            barrier()
        after = _executions_and_compiles()
        counts.append((after[0] - before[0], after[1] - before[1]))
    return losses, counts


def test_compiled_training_step_is_one_executable_per_step():
    # forward and backward graphs are nodes of the lazy graph: with the optimizer's
    # update and AOTAutograd's glue they run as one executable per step
    dev = torch_xla.device()
    x, y = torch.randn(16, 16).to(dev), torch.randn(16, 4).to(dev)
    runs = {}
    for mode in ("lazy", "dynamo"):
        torch.manual_seed(0)
        model = _mlp().to(dev)
        forward = torch.compile(model, backend="openxla") if mode == "dynamo" else model
        losses, counts = _sgd_steps(model, x, y, forward, barrier=xm.mark_step)
        runs[mode] = ([v.item() for v in losses], [p.detach().cpu() for p in model.parameters()], counts)
    (lazy, p_lazy, _), (dyn, p_dyn, counts) = runs["lazy"], runs["dynamo"]
    assert dyn == pytest.approx(lazy, rel=1e-6, abs=1e-7)
    for a, b in zip(p_dyn, p_lazy):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # steps 3 on: the same graph as step 2 (momentum buffers exist), cached
    assert counts[2:] == [(1, 0)] * 4, counts


def test_compiled_graph_that_reads_the_host_runs_lazily(dev):
    # a graph whose trace reads a value on the host cannot be one node: it runs
    # through lazy tracing on every call, with the same values
    import torch._dynamo.config as dcfg
    with dcfg.patch(capture_scalar_outputs=True):
        f = torch.compile(lambda a: a * a.sum().item(), backend="openxla", fullgraph=True)
        x = torch.randn(5)
        for _ in range(2):
            torch.testing.assert_close(f(x.to(dev)).cpu(), x * x.sum().item(), rtol=1e-5, atol=1e-5)
    assert _count("DynamoLazyGraph") >= 1, met.counter_names()


def test_compiled_training_step_without_mark_step_does_not_grow():
    # upstream's compiled training example: the whole step (forward, backward,
    # optimizer) under torch.compile, no barrier in the loop. Each compiled call
    # runs at once, so every step runs the same executables, none compiled anew
    dev = torch_xla.device()
    x, y = torch.randn(16, 16), torch.randn(16, 4)
    torch.manual_seed(0)
    cpu_losses, _ = _sgd_steps(_mlp(), x, y)
    torch.manual_seed(0)
    losses, counts = _sgd_steps(_mlp().to(dev), x.to(dev), y.to(dev),
                                step=torch.compile(_sgd_step, backend="openxla"))
    assert [v.item() for v in losses] == pytest.approx([v.item() for v in cpu_losses], rel=1e-4, abs=1e-6)
    assert counts[3] != (0, 0) and counts[3:] == [(counts[3][0], 0)] * 3, counts
