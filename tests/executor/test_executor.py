"""The executor: barriers, graph caching, async execution, host reads,
step closures, donation, and the CPU fallback."""
import re
import threading
import time

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.engine.compile import cache
from torch_xla.engine.ir import node as ir
from torch_xla.engine.lazy import executor, launch


def _step(x, w):
    return torch.tanh(x @ w).sum()


def test_graph_hash_stable_across_steps_and_changes_with_shape(dev):
    w = torch.randn(4, 4).to(dev)
    hashes = []
    for i in range(3):
        loss = _step(torch.full((2, 4), float(i)).to(dev), w)
        xm.mark_step()
        hashes.append(launch.last_graph_info["hash"])
    assert hashes[0] == hashes[1] == hashes[2]
    loss = _step(torch.ones(3, 4).to(dev), w)
    xm.mark_step()
    assert launch.last_graph_info["hash"] != hashes[0]
    assert met.counter_value("UncachedCompile") == 2
    assert met.counter_value("CachedCompile") == 2
    del loss


def test_same_inputs_different_wiring_do_not_share_an_executable(dev):
    a = torch.tensor([5.0], device=dev)
    b = torch.tensor([2.0], device=dev)
    xm.mark_step()
    r1 = a - b
    xm.mark_step()
    r2 = b - a
    xm.mark_step()
    assert r1.item() == 3.0 and r2.item() == -3.0


def test_ops_are_lazy_until_a_barrier(dev):
    x = torch.ones(3, device=dev)
    y = x * 2 + 1
    assert y._lazy.value[0].kind == ir.OP  # recorded, not run
    assert met.counter_value("UncachedCompile") is None
    xm.mark_step()
    assert y._lazy.value[0].kind == ir.DATA
    assert met.counter_value("MarkStep") == 1
    assert y.cpu().tolist() == [3.0, 3.0, 3.0]


def test_mark_step_is_asynchronous_and_wait_device_ops_blocks(dev):
    a = torch.randn(512, 512, device=dev)
    xm.mark_step()
    for _ in range(8):
        a = a @ a
        a = a / a.abs().max()
    xm.mark_step()
    arr = a._lazy.value[0].data  # the tensor now holds the execution's output future
    xm.wait_device_ops()
    assert arr.is_ready()
    torch_xla.sync(wait=True)
    assert torch.isfinite(a).all().item()


def test_host_read_executes_only_what_it_needs(dev):
    x = torch.ones(4, device=dev)
    needed = x + 1
    other = x * 100  # pending, not needed by the read below
    assert needed.sum().item() == 8.0
    assert other._lazy.value[0].kind == ir.OP  # still pending: the read ran only its own graph
    xm.mark_step()
    assert other._lazy.value[0].kind == ir.DATA


def test_step_closures_run_in_order_after_the_barrier(dev):
    seen = []
    x = torch.tensor([1.0], device=dev)
    y = x * 3
    xm.add_step_closure(lambda t: seen.append(("first", t._lazy.value[0].kind, t.item())), args=(y,))
    xm.add_step_closure(lambda: seen.append(("second",)))
    assert seen == []
    xm.mark_step()
    assert seen == [("first", ir.DATA, 3.0), ("second",)]


def test_async_step_closure_runs_off_thread(dev):
    done = threading.Event()
    names = []

    def closure():
        names.append(threading.current_thread().name)
        done.set()

    xm.add_step_closure(closure, run_async=True)
    xm.mark_step()
    assert done.wait(10)
    assert names[0] != threading.current_thread().name


def test_async_step_closure_error_fails_the_next_barrier(dev):
    # as upstream: the exception of an asynchronous closure is raised by the next
    # barrier that runs asynchronous closures, and those closures are dropped
    raised = threading.Event()
    ran = []

    def bad():
        try:
            raise ValueError("closure failed")
        finally:
            raised.set()

    xm.add_step_closure(bad, run_async=True)
    xm.mark_step()
    assert raised.wait(10)
    time.sleep(0.2)   # the worker records the error just after the closure returns
    xm.add_step_closure(lambda: ran.append(1), run_async=True)
    with pytest.raises(RuntimeError, match="closure failed"):
        xm.mark_step()
    assert ran == []


def test_parameters_updated_in_place_are_donated_and_stay_correct(dev):
    w = torch.zeros(64, 64, device=dev)
    xm.mark_step()
    for i in range(4):
        w.add_(1.0)
        xm.mark_step()
    exe = cache.live()[-1]
    assert exe.donated  # the old buffer of w was given to XLA for reuse
    assert w.cpu().sum().item() == 4 * 64 * 64


def _parameter_copies(hlo):
    params = set(re.findall(r"(%\S+) = \S+ parameter\(", hlo))
    return [m for m in re.findall(r"copy\((%[^)\s,]+)\)", hlo) if m in params]


def test_each_tensor_written_in_place_gets_its_own_donated_buffer(dev):
    # new tensors of the parameters' shape made before the in-place writes (as
    # gradients are before an optimizer step) must not be paired with the donated
    # buffers: XLA would then copy each parameter before the step overwrites it
    w1, w2 = torch.randn(16, 16).to(dev), torch.randn(16, 16).to(dev)
    e1, e2 = w1.cpu(), w2.cpu()
    xm.mark_step()
    for _ in range(2):
        g1, g2 = w1 @ w1, w2 @ w2
        w1.sub_(0.1 * g1)
        w2.sub_(0.1 * g2)
        xm.mark_step()
        ge1, ge2 = e1 @ e1, e2 @ e2
        e1, e2 = e1 - 0.1 * ge1, e2 - 0.1 * ge2
    exe = cache.live()[-1]
    assert exe.donated == (0, 1)
    assert _parameter_copies(exe.compiled.as_text()) == []
    for got, want in ((w1, e1), (w2, e2), (g1, ge1), (g2, ge2)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_a_buffer_still_needed_is_not_donated(dev):
    w = torch.ones(8, device=dev)
    xm.mark_step()
    keep = w * 2          # pending and depends on the old w
    w.add_(5)
    assert w.sum().item() == 48.0   # partial read: must not donate the old w
    assert keep.sum().item() == 16.0


def test_torch_xla_compile_decorator_and_context(dev):
    @torch_xla.compile
    def f(a):
        return a * 2 + 1

    out = f(torch.ones(2, device=dev))
    assert out._lazy.value[0].kind == ir.DATA  # synced when f returned
    with torch_xla.compile():
        z = torch.ones(2, device=dev) * 5
    assert z._lazy.value[0].kind == ir.DATA
    before = torch.ones(2, device=dev) * 7      # pending from before the step
    met.clear_counters()
    with torch_xla.step():                        # syncs it on entry, the step's work on exit
        assert before._lazy.value[0].kind == ir.DATA
        q = torch.ones(2, device=dev) - 1
    assert q._lazy.value[0].kind == ir.DATA and q.cpu().tolist() == [0.0, 0.0]
    assert met.counter_value("MarkStep") == 2


def _no_lowering_op():
    lib = torch.library.Library("torch_xla_test", "FRAGMENT")
    lib.define("scale_by_three(Tensor x) -> Tensor")
    lib.impl("scale_by_three", lambda x: x * 3, "CPU")
    lib.impl("scale_by_three", lambda x: torch.empty_like(x), "Meta")
    return lib


_LIB = _no_lowering_op()


def test_op_without_lowering_falls_back_to_cpu_and_is_counted(dev):
    x = torch.arange(4.0, device=dev)
    y = torch.ops.torch_xla_test.scale_by_three(x) + 1
    assert y.device == dev
    assert y.cpu().tolist() == [1.0, 4.0, 7.0, 10.0]
    assert met.counter_value("aten::scale_by_three") == 1
    assert "aten::scale_by_three" in met.short_metrics_report()
    assert "aten::scale_by_three" in met.executed_fallback_ops()


def test_compile_cache_is_an_lru(dev, monkeypatch):
    monkeypatch.setenv("XLA_COMPILATION_CACHE_SIZE", "2")   # read at each compile
    cache.clear()
    for n in (1, 2, 3):
        (torch.ones(n, device=dev) + 1).sum().item()
    assert cache.size() == 2


def test_metrics_count_compiles_executions_and_transfers(dev):
    # another graph with the same scalar first: its pool ([2]) stays on the device,
    # so the counts below do not depend on which tests ran before
    (torch.ones(5, device=dev) * 2).sum().item()
    met.clear_all()
    x = torch.ones(3).to(dev)           # one upload
    y = (x * 2).sum()
    xm.mark_step()                      # one compile, one execution
    assert y.item() == 6.0              # one read
    assert met.counter_value("UncachedCompile") == 1
    assert met.metric_data("ExecuteTime")[0] == 1
    assert met.metric_data("TransferToDeviceTime")[0] == 1
    assert met.metric_data("TransferFromDeviceTime")[0] == 1
    assert met.metric_data("CompileTime")[0] == 1


def test_an_accumulator_made_before_the_loop_keys_one_graph(dev):
    # made (pending) before the first step, written in every step: the step's graph
    # must not depend on whether the accumulator was first made in this step
    w = torch.randn(4, 3).to(dev)
    xm.mark_step()
    met.clear_all()
    total = torch.zeros((), dtype=torch.float32).to(dev)   # made just before the loop
    for i in range(4):
        x = torch.full((2, 4), float(i)).to(dev)
        pred = (x @ w).argmax(dim=1)
        total += pred.sum().float()
        xm.mark_step()
    assert met.counter_value("UncachedCompile") == 1
    expect = sum(float((torch.full((2, 4), float(i)) @ w.cpu()).argmax(dim=1).sum()) for i in range(4))
    assert total.item() == expect


def test_root_order_follows_the_latest_writes(dev):
    a = torch.zeros(3).to(dev)          # device data
    b = torch.ones(3).to(dev) * 2       # pending
    a += 5                              # a becomes pending after b
    roots = executor.pending_roots(None)
    assert [r[0] for r in roots][-2:] == [b._lazy.value[0], a._lazy.value[0]]
    xm.mark_step()
    assert a.cpu().tolist() == [5.0] * 3 and b.cpu().tolist() == [2.0] * 3


def test_a_read_in_a_loop_without_barriers_does_not_rerun_earlier_iterations(dev):
    # model.generate reads a flag each token and never syncs: the live tensors a read's
    # graph computes come back as data, so each iteration's graph starts from them
    met.clear_all()
    x = torch.zeros(4, device=dev)
    ref = torch.zeros(4)
    for _ in range(6):
        x = x * 2 + 1
        ref = ref * 2 + 1
        assert x.sum().item() == ref.sum().item()
    assert met.counter_value("UncachedCompile") <= 2   # the first step, then one graph for all
    assert launch.last_graph_info["n_nodes"] <= 4
    torch.testing.assert_close(x.cpu(), ref)


def test_exit_waits_for_the_last_launched_execution():
    # A script that ends right after its last sync() must not reach C++ static
    # destructors while XLA:CPU still runs that step (it used to segfault at exit).
    x = torch.randn(600, 600, device="xla")
    for _ in range(6):
        x = torch.tanh(x @ x / 600)
    torch_xla.sync()
    arrays = list(launch.in_flight)
    assert arrays
    executor._drain_at_exit()
    assert all(a.is_ready() for a in arrays)


class _Pending:
    """A buffer that becomes ready after `polls` checks (or never)."""

    def __init__(self, polls):
        self.polls, self.checked = polls, 0

    def is_ready(self):
        self.checked += 1
        return self.polls is not None and self.checked > self.polls


def test_exit_drain_polls_every_live_buffer_until_ready_within_its_bound(monkeypatch):
    slow, done = _Pending(5), _Pending(0)
    monkeypatch.setattr(executor.jax, "live_arrays", lambda: [done, slow])
    executor._drain_at_exit(limit_s=30.0)
    assert slow.checked == 6 and done.checked == 1      # waited until the slow one was ready
    never = _Pending(None)
    monkeypatch.setattr(executor.jax, "live_arrays", lambda: [never])
    t0 = time.monotonic()
    executor._drain_at_exit(limit_s=0.05)               # a dead collective peer cannot hang the exit
    assert time.monotonic() - t0 < 2.0 and never.checked >= 1
