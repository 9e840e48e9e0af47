"""Convolutions on the CPU and the persistent compilation cache.

    python benchmarks/bench_resnet.py [--batch 16] [--steps 4] [--quick]

[ResNet-18 step] a hand-written ResNet-18 (BatchNorm in training mode, 3x128x128
images, 100 classes, SGD momentum; _models.torch_resnet18 / jax_resnet18), each
side in a fresh process: torch_xla (ours), pure JAX, eager PyTorch on the CPU
(all threads, and one thread) and upstream torch_xla 2.9 when UPSTREAM_PYTHON names
a Python that has it. Prints the first and second step (trace + compile + execute
+ wait), the steady step, compile time (first + second - 2 x steady; JAX: first -
steady) and the ratios to eager, to pure JAX and to upstream.

[persistent cache] for the MNIST CNN, the small GPT and the ResNet-18: one process
fills an empty cache (xr.initialize_cache), a second process with the same cache
trains the same way. Prints both processes' first step (trace, compile or load,
execute, wait; the model was built and moved to the device before), the second
process's steady step, its first step's time over a steady step (what a fresh
process adds: first-time tracing, loading the executable), the time from its
launch to that step's end (Python, torch and JAX start-up included), its cache
hits and its CompileTime. Target: the second process's first step within 1 s of a
steady step. Upstream runs the same when UPSTREAM_PYTHON is set.

--quick (a test's mode): a ResNet-18 with 1/8 of the channels on 32x32 images,
batch 2, 2 steady steps, the cache section for the MNIST CNN only, no upstream.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_core  # noqa: E402

TARGET_CACHE_FIRST_STEP = 1.0   # seconds, second process


def _side(side, args, with_upstream):
    if side == "upstream":
        return bench_core.upstream(args, timeout=1800) if with_upstream else None
    return bench_core.point(args, timeout=1800)


def _f(x, fmt="{:8.2f}s"):
    return fmt.format(x) if x is not None else f"{'-':>{len(fmt.format(0.0))}}"


def _r(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def resnet_section(kind, batch, steps, with_upstream):
    shape = "1/8 width, 3x32x32" if kind == "resnet_tiny" else "3x128x128"
    print(f"\n[ResNet-18 step] batch {batch}, {shape}, 100 classes, SGD momentum; fresh process per side", flush=True)
    res = {}
    for side in ("torch_xla", "jax", "upstream"):
        args = {"mode": "compile", "side": "jax" if side == "jax" else "xla", "kind": kind,
                "batch": batch, "steps": steps}
        print(f"  [{time.strftime('%H:%M:%S')}] {side} ...", flush=True)
        res[side] = _side(side, args, with_upstream)
    for threads in (None, 1):
        name = "eager" if threads is None else "eager-1"
        print(f"  [{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
        res[name] = bench_core.point({"mode": "eager", "kind": kind, "batch": batch, "steps": steps, "threads": threads})

    print(f"  {'side':<26}{'1st step':>10}{'2nd step':>10}{'steady ms':>11}{'compile':>10}{'graphs':>8}"
          f"{'CompileTime':>13}")
    for side, label in (("torch_xla", "torch_xla"), ("upstream", "upstream 2.9"), ("jax", "pure JAX"),
                        ("eager", "eager CPU"), ("eager-1", "eager CPU, 1 thread")):
        r = res.get(side)
        if not r:
            print(f"  {label:<26}not run")
            continue
        if side in ("eager", "eager-1"):   # the label says how many threads torch used
            label = f"eager CPU, {r['threads']} thread{'s' if r['threads'] > 1 else ''}"
            print(f"  {label:<26}{_f(r['first'])}{'':>10}{r['steady'] * 1e3:11.1f}")
            continue
        if side == "jax":
            r["compile"] = r["first"] - r["steady"]
            print(f"  {label:<26}{_f(r['first'])}{_f(r['second'])}{r['steady'] * 1e3:11.1f}{_f(r['compile'])}")
            continue
        r["compile"] = r["first"] + r["second"] - 2 * r["steady"]
        print(f"  {label:<26}{_f(r['first'])}{_f(r['second'])}{r['steady'] * 1e3:11.1f}{_f(r['compile'])}"
              f"{r['graphs']:8d}{_f(r['compile_metric'], '{:12.2f}s')}")
    ours, jax_, up, eager = (res.get(k) or {} for k in ("torch_xla", "jax", "upstream", "eager"))
    print(f"  steady step: torch_xla/eager {_r(ours.get('steady'), eager.get('steady'))}, "
          f"pure JAX/eager {_r(jax_.get('steady'), eager.get('steady'))}, "
          f"torch_xla/JAX {_r(ours.get('steady'), jax_.get('steady'))}, "
          f"torch_xla/upstream {_r(ours.get('steady'), up.get('steady'))}")
    print(f"  compile: torch_xla/upstream {_r(ours.get('compile'), up.get('compile'))}, "
          f"torch_xla/JAX {_r(ours.get('compile'), jax_.get('compile'))}", flush=True)
    return res


def cache_section(models, with_upstream):
    print("\n[persistent cache] a second process loads what the first compiled; first step (trace, compile "
          f"or load, execute, wait), s   target: 2nd process's first step - steady <= {TARGET_CACHE_FIRST_STEP:.0f} s",
          flush=True)
    print(f"  {'model':<34}{'side':<14}{'1st proc.':>10}{'2nd proc.':>10}{'steady':>9}{'2nd-steady':>11}"
          f"{'launch->step':>13}{'hits':>6}{'CompileTime':>12}")
    res = {}
    for label, kind, batch in models:
        for side in ("torch_xla", "upstream"):
            if side == "upstream" and not with_upstream:
                continue
            path = tempfile.mkdtemp(prefix="xla-cache-bench-")
            try:
                runs = []
                for _ in range(2):
                    args = {"mode": "cache", "kind": kind, "batch": batch, "path": path, "started": time.time()}
                    runs.append(_side(side, args, with_upstream))
            finally:
                shutil.rmtree(path, ignore_errors=True)
            res[(kind, side)] = runs
            if not all(runs):
                print(f"  {label:<34}{side:<14}failed")
                continue
            a, b = runs
            over = b["first"] - b["steady"]
            verdict = ("   PASS" if over <= TARGET_CACHE_FIRST_STEP else "   MISS") if side == "torch_xla" else ""
            print(f"  {label:<34}{side:<14}{a['first']:10.2f}{b['first']:10.2f}{b['steady']:9.2f}{over:11.2f}"
                  f"{b['since_start']:13.2f}{b['hits']:6d}{b['compile_metric']:12.2f}{verdict}", flush=True)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=4, help="steps per timed run of the steady step")
    p.add_argument("--quick", action="store_true", help="CI-sized: a narrow ResNet, batch 2, no upstream")
    p.add_argument("--no-cache", action="store_true", help="skip the persistent-cache section")
    a = p.parse_args(argv)
    batch, steps = (2, 2) if a.quick else (a.batch, a.steps)
    with_upstream = bool(bench_core.upstream_python()) and not a.quick
    up_versions = bench_core.upstream_versions(bench_core.upstream_python()) if with_upstream else None
    bench_core.header(up_versions)
    kind = "resnet_tiny" if a.quick else "resnet18"
    resnet_section(kind, batch, steps, with_upstream)
    if not a.no_cache:
        models = [("MNIST CNN, batch 64", "mnist", 64)]
        if not a.quick:
            models += [("GPT 2x128, seq 64, batch 8", "gpt", 8), (f"ResNet-18, batch {batch}", kind, batch)]
        cache_section(models, with_upstream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
