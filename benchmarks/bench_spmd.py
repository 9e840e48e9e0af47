"""Data-parallel training over several CPU devices, four ways, in one run.

    python benchmarks/bench_spmd.py [--models mlp gpt] [--devices 1 2 4] [--quick]

For an MLP (4 x 512, global batch 256, SGD momentum) and a small GPT (2 blocks,
d=128, seq 64, global batch 8, AdamW), ms per step of:
  - SPMD: one process, `xr.use_spmd()`, the batch sharded over a 1-D mesh with
    `mark_sharding`, parameters replicated, the step traced lazily every time;
  - SPMD compiled: the same step under `torch_xla.compile(replay=True)`, which
    replays the captured executable without tracing Python ops;
  - multi-process: one process per device (`torch_xla.launch`), each with
    batch/N, gradients all-reduced by `xm.optimizer_step`;
  - pure JAX: the same model and step under `jax.jit` with the batch placed by
    a `NamedSharding` over the same devices.
Each point runs in a fresh process with CPU_NUM_DEVICES=N. Target: the SPMD
step <= 1.15x the pure-JAX sharded step. On a 2-core machine the lazy step's
Python tracing takes a core from XLA's thread pool, which is why the compiled
column exists: it is the step with that cost removed.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import median_step, run_point  # noqa: E402
BATCH = {"mlp": 256, "gpt": 8}


def _torch_model(model, batch):
    """-> (module, inputs, target, loss_fn, optimizer factory)."""
    import torch
    from _models import torch_gpt, torch_mlp
    if model == "mlp":
        m, x, y, loss_fn = torch_mlp(batch)
        return m, x, y, loss_fn, lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)
    m, x, y, loss_fn = torch_gpt(batch, blocks="explicit")
    # capturable: the step count lives on the device, so a replayed step is exact
    return m, x, y, loss_fn, lambda ps: torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.01, capturable=True)


def _spmd(model, steps, compiled):
    import numpy as np
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    dev = torch_xla.device()
    m, data, target, loss_fn, make_opt = _torch_model(model, BATCH[model])
    m, data, target = m.to(dev), data.to(dev), target.to(dev)
    xs.mark_sharding(data, mesh, ("data",) + (None,) * (data.dim() - 1))
    xs.mark_sharding(target, mesh, ("data",) + (None,) * (target.dim() - 1))
    opt = make_opt(m.parameters())

    def train(data, target):
        opt.zero_grad()
        loss = loss_fn(m(data), target)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        train = torch_xla.compile(train, replay=True)

        def step():
            train(data, target)
    else:
        def step():
            train(data, target)
            xm.mark_step()
    return median_step(step, xm.wait_device_ops, steps)


def point_spmd(model, steps):
    return _spmd(model, steps, compiled=False)


def point_spmd_compiled(model, steps):
    return _spmd(model, steps, compiled=True)


def _mp_replica(index, model, steps, out):
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    dev = torch_xla.device()
    m, data, target, loss_fn, make_opt = _torch_model(model, BATCH[model] // xr.world_size())
    m, data, target = m.to(dev), data.to(dev), target.to(dev)
    opt = make_opt(m.parameters())

    def step():
        opt.zero_grad()
        loss_fn(m(data), target).backward()
        xm.optimizer_step(opt)
        xm.mark_step()
    secs = median_step(step, xm.wait_device_ops, steps)
    if index == 0:
        with open(out, "w") as f:
            json.dump(secs, f)


def point_multiprocess(model, steps):
    import tempfile
    import torch_xla
    out = os.path.join(tempfile.mkdtemp(), "mp.json")
    torch_xla.launch(_mp_replica, args=(model, steps, out))
    with open(out) as f:
        return json.load(f)


def point_jax(model, steps):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from _models import jax_gpt, jax_mlp
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rep = NamedSharding(mesh, P())
    if model == "mlp":
        step_fn, (params, bufs, x, y) = jax_mlp(BATCH[model])
        x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
        y = jax.device_put(y, NamedSharding(mesh, P("data")))
        holder = {"s": (*jax.device_put((params, bufs), rep), x, y)}

        def step():
            holder["s"] = step_fn(*holder["s"])
    else:
        step_fn, state = jax_gpt(BATCH[model])
        batch = NamedSharding(mesh, P("data", None))
        holder = {"s": (*jax.device_put(state[:4], rep), *jax.device_put(state[4:], batch))}

        def step():
            holder["s"] = step_fn(holder["s"])

    return median_step(step, lambda: jax.block_until_ready(holder["s"]), steps)


POINTS = {"spmd": point_spmd, "compiled": point_spmd_compiled, "multiprocess": point_multiprocess,
          "jax": point_jax}
KINDS = ("spmd", "compiled", "multiprocess", "jax")


def _run(kind, model, n, steps):
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(n), "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
    r = run_point(__file__, ["--point", kind, "--model", model, "--steps", str(steps)], env, timeout=1200)
    return (None, r["error"]) if "error" in r else (r["secs"], None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["mlp", "gpt"], choices=sorted(BATCH))
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--point", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.point:
        print(json.dumps({"secs": POINTS[a.point](a.model, a.steps)}))
        return 0
    steps = 5 if a.quick else a.steps
    print(f"data-parallel training; ms/step (median of 3 x {steps} steps); target: SPMD <= 1.15x pure JAX")
    for model in a.models:
        what = {"mlp": "MLP 4x512, SGD momentum", "gpt": "GPT 2x128 (batch-first blocks), seq 64, AdamW"}[model]
        print(f"{what}, global batch {BATCH[model]}")
        print(f"  {'devices':<9}{'SPMD':>9}{'compiled':>10}{'multi-proc':>12}{'pure JAX':>10}"
              f"{'SPMD/JAX':>10}{'compiled/JAX':>14}")
        for n in a.devices:
            row = {}
            for kind in KINDS:
                if kind == "multiprocess" and n == 1:
                    row[kind] = (None, "n/a")
                    continue
                row[kind] = _run(kind, model, n, steps)
            cells = [f"{row[k][0] * 1e3:.2f}" if row[k][0] else (row[k][1] or "-")[:9] for k in KINDS]
            jx = row["jax"][0]
            ratios = [f"{row[k][0] / jx:.2f}" if row[k][0] and jx else "-" for k in ("spmd", "compiled")]
            print(f"  {n:<9}{cells[0]:>9}{cells[1]:>10}{cells[2]:>12}{cells[3]:>10}{ratios[0]:>10}{ratios[1]:>14}",
                  flush=True)
            for k in KINDS:
                if row[k][0] is None and row[k][1] not in (None, "n/a"):
                    print(f"    {k} failed: {row[k][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
