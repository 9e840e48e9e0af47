"""Host time of a training step: where it goes, and what it costs the device.

On a CPU machine the host's Python and XLA's compute threads share the same
cores, so every millisecond a training step spends in Python comes partly out of
the program's run. This benchmark measures both sides, in one process each:

  [host work beside XLA]  the pure-JAX training step of each bench_core model
                          alone, and with a fixed amount of Python work added to
                          every step (a busy loop, 0.5 to 2.5 ms of CPU): the step
                          time it costs pure JAX itself to have that much host
                          work per step;
  [host time per step]    one torch_xla training step, lazy and under
                          torch.compile(backend="openxla"), phase by phase
                          (zero_grad, forward, loss, backward, optimizer step,
                          mark_step): the wall time of each phase (the previous
                          step's run waited for first, as bench_core's per-step
                          tracing), how much of it is spent inside this
                          project's dispatcher (XLATensor.__torch_dispatch__),
                          and the aten calls it receives (as bench_core counts
                          a step's ops).
                          The rest of a phase is PyTorch's own work (nn.Module
                          calls, the autograd engine and its device thread,
                          Dynamo's guards, the optimizer's Python) and, for
                          zero_grad and mark_step, this project's barrier and
                          buffer release;
  [per op]                the lazy step's time per aten call over bench_core's
                          chain per op (bench_core's per-step tracing target
                          is 2x): as measured, without the dispatcher's share,
                          and PyTorch's own part alone;
  [PyTorch's floor]       what any implementation that runs the user's
                          PyTorch step pays before doing anything of its own:
                          the model's structure on the CPU at sizes where
                          its arithmetic is negligible (the same modules,
                          parameters and aten calls: MLP width 8, GPT d 8,
                          MNIST batch 1; _floor_model):
                          (a) its torch.compile training step with a backend
                          that computes nothing (each compiled graph returns
                          the outputs of its first call), run beside pure
                          JAX's step of the real model, against JAX's step
                          alone, rounds alternating;
                          (b) its eager training step (one thread: C++
                          kernels, no tracer), warm and right after pure
                          JAX's step ran, per aten call of the lazy step (the
                          unit of bench_core's per-op target), over the
                          chain's per op.

    python benchmarks/bench_host.py [--quick] [--json PATH]
"""
import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_core  # noqa: E402
from _report import metadata, write_json  # noqa: E402

BUSY_MS = (0.5, 1.0, 2.0, 2.5)
PHASES = ("zero_grad", "forward", "loss", "backward", "opt.step", "mark_step")


def _busy(ms):
    """Hold the CPU (and the GIL) for `ms` of this thread's CPU time."""
    end = time.thread_time() + ms / 1e3
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def bench_busy(kind, batch, steps, rounds):
    """Pure JAX's cached step (s) alone and with each BUSY_MS of host work per
    step; rounds alternate the settings so the machine's load drifts alike."""
    step, sync = bench_core._jax_step(kind, batch)

    def busy(ms):
        def fn():
            _busy(ms)
            step()
        return fn, sync
    named = {0.0: (step, sync), **{ms: busy(ms) for ms in BUSY_MS}}
    return bench_core.alternate(named, steps, rounds, pick=statistics.median)


class _DispatchClock:
    """Time spent inside XLATensor.__torch_dispatch__ (outermost calls, so nested
    ones are not counted twice) and the calls it receives, counted as
    bench_core.count_dispatched_ops counts them (every call, a decomposition's
    own calls too); on every thread: autograd runs backward on a device thread."""

    def __init__(self):
        from torch_xla.engine.lazy.tensor import XLATensor
        self.cls = XLATensor
        self.attr = XLATensor.__dict__["__torch_dispatch__"]
        self.ns = 0
        self.calls = 0
        self._depth = collections.defaultdict(int)

    def __enter__(self):
        import threading
        inner = self.attr.__func__
        depth = self._depth

        def timed(cls, func, types, args=(), kwargs=None):
            me = threading.get_ident()
            depth[me] += 1
            self.calls += 1
            t0 = time.perf_counter_ns()
            try:
                return inner(cls, func, types, args, kwargs)
            finally:
                depth[me] -= 1
                if not depth[me]:
                    self.ns += time.perf_counter_ns() - t0
        self.cls.__torch_dispatch__ = classmethod(timed)
        return self

    def __exit__(self, *exc):
        self.cls.__torch_dispatch__ = self.attr


def bench_phases(kind, batch, compiled, steps, warmup=5):
    """Per phase of one step: (median wall s, median s inside the dispatcher,
    median aten calls), the device idle at the start of each step."""
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, opt = bench_core.xla_parts(kind, batch, compiled)
    box = {}
    run = {"zero_grad": opt.zero_grad,
           "forward": lambda: box.__setitem__("out", model(data)),
           "loss": lambda: box.__setitem__("loss", loss_fn(box.pop("out"), target)),
           "backward": lambda: box.pop("loss").backward(),
           "opt.step": opt.step,
           "mark_step": xm.mark_step}
    wall = collections.defaultdict(list)
    inside = collections.defaultdict(list)
    calls = collections.defaultdict(list)
    with _DispatchClock() as clock:
        for i in range(warmup + steps):
            xm.wait_device_ops()
            for name in PHASES:
                ns, n = clock.ns, clock.calls
                t0 = time.perf_counter_ns()
                run[name]()
                t1 = time.perf_counter_ns()
                if i >= warmup:
                    wall[name].append((t1 - t0) / 1e9)
                    inside[name].append((clock.ns - ns) / 1e9)
                    calls[name].append(clock.calls - n)
    xm.wait_device_ops()
    return {name: {"wall": statistics.median(wall[name]), "inside": statistics.median(inside[name]),
                   "ops": statistics.median(calls[name])} for name in PHASES}


def _floor_model(kind):
    """(model, data, target, loss_fn) on the CPU: the benchmark model's modules,
    parameters and aten calls at sizes where the arithmetic costs next to
    nothing (the MNIST CNN's sizes are fixed by its 28x28 input: batch 1)."""
    if kind == "gpt":
        return bench_core.torch_gpt(2, seq=4, vocab=16, d=8, heads=4, blocks="explicit")
    if kind == "mlp":
        return bench_core.torch_mlp(2, width=8)
    return bench_core.torch_mnist(1)


def _memo_compiler(gm, example_inputs):
    """An AOTAutograd compiler whose graph computes nothing: every call returns
    the outputs of the first (boxed calling convention, as torch's own)."""
    first = []

    def run(args):
        if not first:
            first.append(gm(*args))
        args.clear()
        return first[0]
    run._boxed_call = True
    return run


def bench_floor_compiled(kind, batch, steps, rounds):
    """(floor step alone s, pure JAX's step alone s, JAX's step with the floor
    step beside it s): the floor is _floor_model's torch.compile training step
    with _memo_compiler for forward and backward, with the same plain SGD
    momentum and zero_grad."""
    import torch
    from torch._dynamo.backends.common import aot_autograd
    model, data, target, loss_fn = _floor_model(kind)
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=_memo_compiler,
                                                         bw_compiler=_memo_compiler))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def floor():
        opt.zero_grad()
        loss_fn(compiled(data), target).backward()
        opt.step()
    jstep, sync = bench_core._jax_step(kind, batch)

    def both():
        jstep()
        floor()
    out = bench_core.alternate({"jax": (jstep, sync), "beside": (both, sync)}, steps, rounds,
                               pick=statistics.median)
    out["floor"] = bench_core.timeit(floor, steps)
    return out


def bench_floor_eager(kind, batch, reps):
    """_floor_model's eager training step, one intra-op thread: (median s warm,
    median s right after pure JAX's step (of the benchmark model at `batch`)
    ran, aten calls)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    model, data, target, loss_fn = _floor_model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))
    try:
        for _ in range(3):
            step()
        with Count():
            step()
        jstep, sync = bench_core._jax_step(kind, batch)
        warm, cold = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            step()
            warm.append(time.perf_counter() - t0)
            jstep()
            sync()
            t0 = time.perf_counter()
            step()
            cold.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return {"warm": statistics.median(warm), "cold": statistics.median(cold), "ops": Count.calls}


def _sum(phases, key):
    return sum(p[key] for p in phases.values())


def report(res):
    print("\n[host work beside XLA] pure JAX's cached step, ms, alone and with host Python work added to "
          "every step")
    print(f"  {'model':<28}{'alone':>9}" + "".join(f"{f'+{ms:g} ms':>16}" for ms in BUSY_MS))
    for kind, t in res["busy"].items():
        base = t[0.0]
        cells = "".join(f"{t[ms] * 1e3:>9.2f} ({t[ms] / base:.2f})" for ms in BUSY_MS)
        print(f"  {bench_core.NAMES[kind]:<28}{base * 1e3:>9.2f}{cells}")
    print("  (in brackets: over the step alone; the work is a busy loop holding the CPU and the GIL, as "
          "Python does)")
    chain = res["chain_us"]
    for mode in ("lazy", "compiled"):
        title = "lazy tracing" if mode == "lazy" else 'torch.compile(backend="openxla")'
        print(f"\n[host time per step] {title}: per phase, wall us / inside the dispatcher us / aten calls "
              "(the previous step's run waited for)")
        print(f"  {'model':<28}" + "".join(f"{p:>20}" for p in PHASES) + f"{'total':>20}")
        for kind, ph in res[mode].items():
            cells = "".join(f"{p['wall'] * 1e6:>8.0f}/{p['inside'] * 1e6:>6.0f}/{p['ops']:>4.0f}"
                            for p in ph.values())
            total = f"{_sum(ph, 'wall') * 1e6:>8.0f}/{_sum(ph, 'inside') * 1e6:>6.0f}/{_sum(ph, 'ops'):>4.0f}"
            print(f"  {bench_core.NAMES[kind]:<28}{cells}{total}")
    print(f"\n[per op] lazy step time per aten call, and over the chain's per op ({chain:.2f} us): as measured; "
          "without the dispatcher's share; and PyTorch's own part alone (forward, loss, backward and "
          "optimizer phases outside the dispatcher: what the step would cost if this project's tracing, "
          "barrier and buffer release were free)")
    for kind, ph in res["lazy"].items():
        ops = _sum(ph, "ops")
        wall, inside = _sum(ph, "wall"), _sum(ph, "inside")
        torch_own = sum(ph[k]["wall"] - ph[k]["inside"] for k in ("forward", "loss", "backward", "opt.step"))
        cells = "".join(f"{t / ops * 1e6:>9.1f} us {t / ops * 1e6 / chain:>5.2f}x"
                        for t in (wall, wall - inside, torch_own))
        print(f"  {bench_core.NAMES[kind]:<28}{cells}")
    print("\n[PyTorch's floor] the model's structure on the CPU at sizes where its arithmetic is negligible. "
          "(a) Its torch.compile step with a backend that computes nothing, ms: alone; pure JAX's step alone; "
          "JAX's step with it beside (over JAX alone; bench_core's target for the compiled step is 1.05)")
    for kind, f in res["floor_compiled"].items():
        print(f"  {bench_core.NAMES[kind]:<28}{f['floor'] * 1e3:>9.3f}{f['jax'] * 1e3:>9.2f}"
              f"{f['beside'] * 1e3:>9.2f} ({f['beside'] / f['jax']:.3f})")
    print(f"  (b) Its eager step, one thread, per aten call of the lazy step: warm; "
          f"right after pure JAX's step ran (over the chain's {chain:.2f} us per op; the target is 2x); eager's "
          "own aten calls")
    for kind, f in res["floor_eager"].items():
        ops = _sum(res["lazy"][kind], "ops")
        cells = "".join(f"{t / ops * 1e6:>9.1f} us {t / ops * 1e6 / chain:>5.2f}x" for t in (f["warm"], f["cold"]))
        print(f"  {bench_core.NAMES[kind]:<28}{cells}{f['ops']:>6}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="CI size: one model, few steps")
    p.add_argument("--json", metavar="PATH", help="write the results (and the run's metadata) as JSON")
    a = p.parse_args()
    started = metadata()
    bench_core.header(None)
    models = bench_core.MODELS[:1] if a.quick else bench_core.MODELS
    steps, rounds, phase_steps = (6, 1, 5) if a.quick else (30, 9, 60)
    res = {"busy": {}, "lazy": {}, "compiled": {}, "floor_compiled": {}, "floor_eager": {}}
    for kind, batch, _ in models:
        print(f"... {kind}: pure JAX with host work", flush=True)
        res["busy"][kind] = bench_busy(kind, batch, steps, rounds)
        for mode in ("lazy", "compiled"):
            print(f"... {kind}: {mode} step phases", flush=True)
            res[mode][kind] = bench_phases(kind, batch, mode == "compiled", phase_steps)
        print(f"... {kind}: PyTorch's floor", flush=True)
        res["floor_compiled"][kind] = bench_floor_compiled(kind, batch, steps, max(rounds, 3))
        res["floor_eager"][kind] = bench_floor_eager(kind, batch, phase_steps)
    print("... tracing chain", flush=True)
    res["chain_us"] = bench_core.bench_tracing(reps=3 if a.quick else 10)[0]
    report(res)
    if a.json:
        data = dict(started, benchmark="bench_host",
                    settings={"steps": steps, "rounds": rounds, "phase_steps": phase_steps, "quick": a.quick},
                    models={k: {"batch": b, "name": n} for k, b, n in models},
                    busy={k: {str(ms): v for ms, v in t.items()} for k, t in res["busy"].items()},
                    lazy=res["lazy"], compiled=res["compiled"], floor_compiled=res["floor_compiled"],
                    floor_eager=res["floor_eager"], chain_us=res["chain_us"])
        write_json(a.json, data)


if __name__ == "__main__":
    main()
