"""Core benchmark: tracing cost and cached training-step time, side by side.

Competitors in one run (this machine is noisy; the ratios are what count):
  * torch_xla (this project): lazy tracing + cached XLA executable
  * pure JAX: the same model as jax.jit(jax.value_and_grad(...)) + SGD momentum
  * eager PyTorch on the CPU
  * upstream torch_xla 2.9, when UPSTREAM_PYTHON names a Python that has it
    (its numbers come from a subprocess running benchmarks/_upstream_worker.py)

Usage: python benchmarks/bench_core.py [--steps N] [--quick]
"""
import argparse
import gc
import json
import os

import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _models import jax_mlp, jax_mnist, torch_gpt, torch_mlp, torch_mnist  # noqa: E402


def timeit(step, n, warmup=3, sync=lambda: None, reps=3):
    """Steady-state time per step: n steps back to back, one sync at the end
    (a training loop never waits between steps), best of `reps` runs."""
    for _ in range(warmup):
        step()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def bench_tracing(n_ops=3000, reps=10):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    dev = torch_xla.device()
    x = torch.randn(16, device=dev)

    def chain(y):
        for _ in range(n_ops // 2):
            y = y * 1.0001
            y = y + 0.5
        return y

    for _ in range(3):
        chain(x)
        xm.mark_step()
    trace, total = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        chain(x)
        t1 = time.perf_counter()
        xm.mark_step()
        xm.wait_device_ops()
        t2 = time.perf_counter()
        trace.append((t1 - t0) / n_ops)
        total.append((t2 - t0) / n_ops)
    return statistics.median(trace) * 1e6, statistics.median(total) * 1e6


def _torch_step(kind, batch, on_xla):
    """One SGD-momentum training step of the PyTorch model, eager CPU or XLA."""
    import torch
    model, data, target, loss_fn = {"mlp": torch_mlp, "mnist": torch_mnist, "gpt": torch_gpt}[kind](batch)
    barrier = lambda: None  # noqa: E731
    if on_xla:
        import torch_xla
        import torch_xla.core.xla_model as xm
        dev = torch_xla.device()
        model, data, target, barrier = model.to(dev), data.to(dev), target.to(dev), xm.mark_step
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()
        barrier()
    return step


def bench_torch_xla_step(kind, batch, steps):
    import torch_xla.core.xla_model as xm
    return timeit(_torch_step(kind, batch, True), steps, sync=xm.wait_device_ops)


def bench_eager_step(kind, batch, steps):
    return timeit(_torch_step(kind, batch, False), steps)


def bench_jax_step(kind, batch, steps):
    import jax
    step_fn, state = (jax_mlp if kind == "mlp" else jax_mnist)(batch)
    holder = {"s": state}

    def step():
        holder["s"] = step_fn(*holder["s"])

    def sync():
        jax.block_until_ready(holder["s"])

    return timeit(step, steps, sync=sync)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bench_rss(steps=1000, batch=256):
    """RSS over `steps` cached MLP steps: flat means no tensor/graph/executable leak."""
    import torch_xla.core.xla_model as xm
    step = _torch_step("mlp", batch, True)
    samples = []
    for i in range(steps):
        step()
        if i % 50 == 0:
            xm.wait_device_ops()
            gc.collect()
            samples.append(rss_mb())
    return samples


def upstream(args):
    py = os.environ.get("UPSTREAM_PYTHON")
    if not py:
        return None
    try:
        out = subprocess.run([py, os.path.join(HERE, "_upstream_worker.py"), json.dumps(args)],
                             capture_output=True, text=True, timeout=1800)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        print(f"(upstream torch_xla run failed: {e})")
        return None


def bench_index_checks(kind, batch, blocks=12, per_block=5):
    """The deferred index check's cost on one training step, measured in one
    process: blocks of steps with the checks on and off alternate (each setting
    has its own cached graph), so machine noise hits both alike. -> (on, off)
    median seconds per step."""
    import torch_xla.core.xla_model as xm
    from torch_xla.engine.lazy import index_checks
    step = _torch_step(kind, batch, True)
    times = {True: [], False: []}
    saved = index_checks.ENABLED
    try:
        for flag in (True, False, True, False):   # compile and warm both graphs
            index_checks.ENABLED = flag
            step()
            xm.wait_device_ops()
        for i in range(2 * blocks):
            flag = i % 2 == 0
            index_checks.ENABLED = flag
            t0 = time.perf_counter()
            for _ in range(per_block):
                step()
            xm.wait_device_ops()
            times[flag].append((time.perf_counter() - t0) / per_block)
    finally:
        index_checks.ENABLED = saved
    return statistics.median(times[True]), statistics.median(times[False])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rss-steps", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="fewer steps, no RSS run")
    a = p.parse_args()
    steps = 8 if a.quick else a.steps
    print(f"machine: {os.cpu_count()} cores; torch_xla on JAX {__import__('jax').__version__}")

    per_op, per_op_total = bench_tracing()
    print(f"\n[tracing] chain of 3,000 elementwise ops with scalar operands, graph cached")
    print(f"  torch_xla: {per_op:.2f} us/op traced ({per_op_total:.2f} us/op with sync + execute)   target <= 10")

    up = upstream({"steps": steps})
    if up:
        print(f"  upstream torch_xla 2.9: {up['per_op']:.2f} us/op traced")

    rows = []
    for kind, batch in (("mlp", 256), ("mnist", 64)):
        jx = bench_jax_step(kind, batch, steps)
        tx = bench_torch_xla_step(kind, batch, steps)
        ea = bench_eager_step(kind, batch, steps)
        rows.append((kind, batch, tx, jx, ea))
    print("\n[cached training step] median ms/step (SGD momentum)")
    print(f"  {'model':<28}{'torch_xla':>11}{'pure JAX':>11}{'eager CPU':>11}{'xla/JAX':>9}{'xla/eager':>11}")
    for kind, batch, tx, jx, ea in rows:
        name = "MLP 4x512, batch 256" if kind == "mlp" else "MNIST CNN, batch 64"
        print(f"  {name:<28}{tx*1e3:>11.2f}{jx*1e3:>11.2f}{ea*1e3:>11.2f}{tx/jx:>9.2f}{tx/ea:>11.2f}")
        if up and kind in up:
            print(f"  {'  upstream torch_xla 2.9':<28}{up[kind]*1e3:>11.2f}{'':>11}{'':>11}{up[kind]/jx:>9.2f}")
    print("  target: MLP torch_xla/JAX <= 1.15")

    print("\n[index checks] deferred in-graph index checks, on vs off (XLA_CHECK_INDICES), "
          "alternating blocks in one process   target <= +3%")
    for kind, batch, name in (("mnist", 64, "MNIST CNN, batch 64"), ("gpt", 8, "GPT 2x128, seq 64, batch 8")):
        on, off = bench_index_checks(kind, batch, blocks=4 if a.quick else 12)
        print(f"  {name:<28} on {on*1e3:.2f} ms, off {off*1e3:.2f} ms ({(on / off - 1) * 100:+.1f}%)")

    if not a.quick:
        samples = bench_rss(a.rss_steps)
        q = max(len(samples) // 4, 1)
        early = statistics.mean(samples[1:1 + q])   # after warm-up
        late = statistics.mean(samples[-q:])
        growth = (late - early) / early * 100
        print(f"\n[memory] RSS over {a.rss_steps} cached MLP steps (sampled every 50): after warm-up "
              f"{early:.0f} MB, last quarter {late:.0f} MB ({growth:+.1f}%), peak {max(samples):.0f} MB   "
              f"target within 5%")


if __name__ == "__main__":
    main()
