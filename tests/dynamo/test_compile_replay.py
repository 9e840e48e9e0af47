"""torch_xla.compile(fn, replay=True): after two identical traced calls of an
argument signature, calls run the cached executable with no Python tracing.
Everything is compared with eager PyTorch on the CPU."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.debug.metrics as met


def _counts():
    return (met.counter_value("CompiledFnReplayed") or 0, met.counter_value("CompiledFnTraced") or 0)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _train(make_opt_cpu, make_opt_xla, dev, steps=6):
    cpu = _mlp()
    xla = copy.deepcopy(cpu).to(dev)
    opt_c, opt_x = make_opt_cpu(cpu.parameters()), make_opt_xla(xla.parameters())

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    compiled = torch_xla.compile(lambda x, y: step(xla, opt_x, x, y), replay=True)
    r0, t0 = _counts()
    for _ in range(steps):
        x, y = torch.randn(4, 8), torch.randn(4, 4)
        want = step(cpu, opt_c, x, y)
        got = compiled(x.to(dev), y.to(dev))
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(cpu.parameters(), xla.parameters()):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-4, atol=1e-5)
    r1, t1 = _counts()
    return r1 - r0, t1 - t0


def test_sgd_momentum_step_replays(dev):
    # call 1 makes the momentum buffers, calls 2 and 3 capture the same graph, then replay
    sgd = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa: E731
    replayed, traced = _train(sgd, sgd, dev)
    assert (replayed, traced) == (3, 3)


def test_adam_capturable_replays(dev):
    replayed, traced = _train(lambda p: torch.optim.Adam(p, lr=0.01),
                              lambda p: torch.optim.Adam(p, lr=0.01, capturable=True), dev)
    assert replayed == 3


def test_python_values_that_change_prevent_replay(dev):
    # plain Adam computes its bias correction in Python from a CPU step count: the two
    # captures differ in a scalar, so every call traces (and stays correct)
    adam = lambda p: torch.optim.Adam(p, lr=0.01)  # noqa: E731
    replayed, traced = _train(adam, adam, dev, steps=4)
    assert (replayed, traced) == (0, 4)


def test_step_that_returns_nothing_replays(dev):
    # most training loops' step returns None: a replay's None result is still a replay
    cpu = _mlp()
    xla = copy.deepcopy(cpu).to(dev)
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.05, momentum=0.9)
    opt_x = torch.optim.SGD(xla.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(4, 8), torch.randn(4, 4)
    xd, yd = x.to(dev), y.to(dev)

    def step(model, opt, x, y):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    compiled = torch_xla.compile(lambda: step(xla, opt_x, xd, yd), replay=True)
    r0, t0 = _counts()
    for _ in range(6):
        step(cpu, opt_c, x, y)
        assert compiled() is None
    assert _counts() == (r0 + 3, t0 + 3)
    for a, b in zip(cpu.parameters(), xla.parameters()):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-4, atol=1e-5)


def test_call_that_never_settles_stops_capturing(dev, monkeypatch):
    # capturing walks every live tensor: after a few captures that differ each time,
    # calls are traced plainly (and stay correct)
    from torch_xla.engine import api
    captures = []
    real = api.capture_call
    monkeypatch.setattr(api, "capture_call", lambda *a, **k: captures.append(1) or real(*a, **k))
    adam = lambda p: torch.optim.Adam(p, lr=0.01)  # noqa: E731
    replayed, traced = _train(adam, adam, dev, steps=8)
    assert (replayed, traced) == (0, 8)
    assert len(captures) == 4


def test_a_call_that_settles_late_replays_after_a_retry(dev):
    # a Python value changes on the first six calls, then stays: once given up, a
    # signature is captured again after `retry_every` plain calls, and two captures that
    # agree bring replay back
    state = {"k": 1.0}

    def scale(x):
        return x * state["k"]

    compiled = torch_xla._replaying(scale, torch_xla._CompileContext(False, "scale"), retry_every=2)
    x = torch.randn(4, 3)
    xd = x.to(dev)
    r0, t0 = _counts()
    for i in range(12):
        state["k"] = 1.0 + 0.1 * i if i < 6 else 2.0
        torch.testing.assert_close(compiled(xd).cpu(), x * state["k"])
    # calls 0-3 captured and given up, 4-5 plain, 6-7 captured again and agree, 8-11 replayed
    assert _counts() == (r0 + 4, t0 + 8)


def test_new_signature_or_argument_value_traces_again(dev):
    w = torch.randn(5, 5)
    wx = w.to(dev)

    def f(x, scale):
        return (x @ wx) * scale if scale > 0 else x - 1

    cf = torch_xla.compile(f, replay=True)
    r0, _ = _counts()
    for x, scale in [(torch.randn(3, 5), 2.0)] * 4 + [(torch.randn(2, 5), 2.0)] * 3 + [(torch.randn(3, 5), -1.0)] * 3:
        want = (x @ w) * scale if scale > 0 else x - 1
        torch.testing.assert_close(cf(x.to(dev), scale).cpu(), want, rtol=1e-5, atol=1e-5)
    r1, _ = _counts()
    assert r1 - r0 == 2 + 1 + 1


def test_replay_reads_closed_over_tensors_current_values(dev):
    m = _mlp().to(dev)
    f = torch_xla.compile(lambda x: m(x), replay=True)
    x = torch.randn(2, 8)
    r0, _ = _counts()
    with torch.no_grad():
        for i in range(5):
            if i == 3:   # written outside the compiled function: the replay sees it
                m[0].weight.mul_(2)
            want = _mlp()
            with torch.no_grad():
                if i >= 3:
                    want[0].weight.mul_(2)
            torch.testing.assert_close(f(x.to(dev)).cpu(), want(x), rtol=1e-5, atol=1e-5)
    assert _counts()[0] - r0 == 3


def test_host_read_inside_traces_every_call(dev):
    def f(x):
        return x * 2 if (x.sum() > 0).item() else x * 3

    cf = torch_xla.compile(f, replay=True)
    r0, _ = _counts()
    for s in (1, 1, 1, -1, 1):
        x = torch.full((3,), float(s))
        torch.testing.assert_close(cf(x.to(dev)).cpu(), f(x))
    assert _counts()[0] == r0


def test_dropout_draws_new_masks_on_replay(dev):
    f = torch_xla.compile(lambda x: F.dropout(x, 0.5, training=True), replay=True)
    x = torch.ones(64, device=dev)
    r0, _ = _counts()
    outs = [f(x).cpu() for _ in range(5)]
    assert _counts()[0] - r0 == 3
    for o in outs:
        assert set(o.unique().tolist()) <= {0.0, 2.0}
    assert not torch.equal(outs[3], outs[4])


def test_replay_with_no_function_is_a_decorator(dev):
    @torch_xla.compile(replay=True)
    def twice(x):
        return x * 2

    r0, t0 = _counts()
    for _ in range(4):
        x = torch.randn(5)
        torch.testing.assert_close(twice(x.to(dev)).cpu(), x * 2)
    r1, t1 = _counts()
    assert (r1 - r0, t1 - t0) == (2, 2)


def test_graph_limit_and_full_graph_hold_with_replay(dev):
    f = torch_xla.compile(lambda x: x * 2 + 1, replay=True, full_graph=True, num_different_graphs_allowed=1)
    for _ in range(4):
        x = torch.randn(6)
        torch.testing.assert_close(f(x.to(dev)).cpu(), x * 2 + 1)
    with pytest.raises(RuntimeError, match="Maximum number of different graphs allowed per function exceeded: 1"):
        f(torch.randn(3, device=dev))
