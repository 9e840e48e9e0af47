"""Compile time against graph size: 1, 2 and 4 training steps traced into one graph.

    python benchmarks/bench_compile.py [--sizes 1 2 4] [--models mnist gpt] [--json PATH] [--plot PATH.png]

For each model, k steps run with no barrier between them and one `mark_step`
at the end, so the graph holds k copies of the step; its compile time (our
CompileTime metric: lowering plus XLA) is printed with its ratio to k times the
1-step compile. The same k-step unrolling of the GPT is compiled in pure JAX
for comparison. A ratio near 1.0 is linear; the target is <= 1.3 at 4 steps.
Each point runs in a fresh process after a warm-up compile of an unrelated
graph, so JAX's one-time start-up is in no measurement.

--json PATH writes the points with the date, the machine, the command line and
the git commit (docs/data/bench_compile.json feeds the documentation's benchmark
page); --plot PATH.png draws compile time against graph size (matplotlib).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _report import metadata, pyplot, write_json  # noqa: E402
from _timing import run_point  # noqa: E402


def _warm_up():
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    x = torch.ones(8, device=torch_xla.device())
    (x * 3 + 1).sum().item()
    xm.wait_device_ops()


def point_torch_xla(model, k):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    from _models import torch_gpt, torch_mnist
    _warm_up()
    build = {"mnist": lambda: torch_mnist(16), "gpt": lambda: torch_gpt(4, seq=32, vocab=256, d=64, heads=2)}
    net, data, target, loss_fn = build[model]()
    dev = torch_xla.device()
    net, data, target = net.to(dev), data.to(dev), target.to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    opt.zero_grad()      # one step first: the momentum buffers exist, every step below is alike
    loss_fn(net(data), target).backward()
    opt.step()
    xm.mark_step()
    xm.wait_device_ops()
    met.clear_all()
    for _ in range(k):
        opt.zero_grad()
        loss_fn(net(data), target).backward()
        opt.step()
    t0 = time.perf_counter()
    xm.mark_step()
    xm.wait_device_ops()
    wall = time.perf_counter() - t0
    compile_ns = met.metric_data("CompileTime")[1]
    size = met.metric_data("TensorsGraphSize")
    return {"compile": compile_ns / 1e9, "wall": wall, "nodes": int(size[1]) if size else 0}


def point_jax(model, k):
    import jax
    from _models import jax_gpt
    step, state = jax_gpt(4, seq=32, vocab=256, d=64, heads=2)
    jax.block_until_ready(step(state))

    def many(s):
        for _ in range(k):
            s = step(s)
        return s

    lowered = jax.jit(many).lower(state)
    t0 = time.perf_counter()
    lowered.compile()
    return {"compile": time.perf_counter() - t0}


def _point(kind, model, k):
    r = run_point(__file__, ["--point", json.dumps([kind, model, k])])
    if "error" in r:
        raise RuntimeError(r["error"])
    return r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--models", nargs="+", default=["mnist", "gpt"])
    p.add_argument("--json", metavar="PATH", help="write the points (and the run's metadata) as JSON")
    p.add_argument("--plot", metavar="PATH.png", help="draw compile time against graph size (matplotlib)")
    p.add_argument("--point", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.point:
        kind, model, k = json.loads(a.point)
        print(json.dumps((point_torch_xla if kind == "torch_xla" else point_jax)(model, k)))
        return 0
    started = metadata()   # date, load and commit as the run starts
    print("compile time of k training steps in one graph (SGD momentum); ratio = t(k) / (k * t(1))   "
          "target <= 1.3")
    worst = 0.0
    points = []
    for model in a.models:
        runs = [("torch_xla", model)] + ([("jax", model)] if model == "gpt" else [])
        for kind, m in runs:
            base = None
            for k in a.sizes:
                r = _point(kind, m, k)
                base = base or r["compile"] / k
                ratio = r["compile"] / (k * base)
                if kind == "torch_xla":
                    worst = max(worst, ratio)
                points.append(dict(r, model=m, side=kind, k=k, ratio=ratio))
                extra = f"  TensorsGraphSize {r['nodes']}" if "nodes" in r else ""
                print(f"  {m:<6}{kind:<10} k={k}: {r['compile']:7.2f} s   ratio {ratio:4.2f}{extra}", flush=True)
    print(f"worst torch_xla ratio: {worst:.2f}")
    if a.json or a.plot:
        data = dict(started, benchmark="bench_compile", settings={"sizes": a.sizes, "models": a.models},
                        target_ratio=1.3, worst_ratio=worst, points=points)
        if a.json:
            write_json(a.json, data)
        if a.plot:
            plot(data, a.plot)
    return 0


def plot(data, path):
    """Compile time against graph size (training steps in one graph), one line per model and side,
    beside the ratio t(k) / (k * t(1))."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    series = {}
    for pt in data["points"]:
        series.setdefault((pt["model"], pt["side"]), []).append(pt)
    for (model, side), pts in series.items():
        ks = [pt["k"] for pt in pts]
        label = f"{model}, {'torch_xla' if side == 'torch_xla' else 'pure JAX'}"
        left.plot(ks, [pt["compile"] for pt in pts], marker="o", label=label)
        right.plot(ks, [pt["ratio"] for pt in pts], marker="o", label=label)
    left.set_xlabel("training steps in one graph")
    left.set_ylabel("compile time, s")
    left.set_title("Compile time against graph size")
    right.axhline(1.0, color="grey", lw=0.8, ls=":")
    right.axhline(data["target_ratio"], color="red", lw=0.8, ls="--", label=f"target {data['target_ratio']:g}")
    right.set_xlabel("training steps in one graph")
    right.set_ylabel("t(k) / (k * t(1))")
    right.set_title("Ratio to linear growth")
    for ax in (left, right):
        ax.set_xticks(sorted({pt["k"] for pt in data["points"]}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
