"""Data-parallel training over several CPU devices, three ways, in one run.

    python benchmarks/bench_spmd.py [--devices 1 2 4] [--quick]

For an MLP (4 x 512, global batch 256, SGD momentum), ms per step of:
  - torch_xla SPMD: one process, `xr.use_spmd()`, the batch sharded over a
    1-D mesh with `mark_sharding`, parameters replicated;
  - torch_xla multi-process: one process per device (`torch_xla.launch`),
    each with batch/N, gradients all-reduced by `xm.optimizer_step`;
  - pure JAX: the same model and step under `jax.jit` with the batch placed by
    a `NamedSharding` over the same devices.
Each point runs in a fresh process with CPU_NUM_DEVICES=N. Target: the SPMD
step <= 1.15x the pure-JAX sharded step.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import median_step, run_point  # noqa: E402
BATCH = 256


def point_spmd(steps):
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from _models import torch_mlp
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    dev = torch_xla.device()
    model, data, target, loss_fn = torch_mlp(BATCH)
    model, data, target = model.to(dev), data.to(dev), target.to(dev)
    xs.mark_sharding(data, mesh, ("data", None))
    xs.mark_sharding(target, mesh, ("data",))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()
        xm.mark_step()
    return median_step(step, xm.wait_device_ops, steps)


def _mp_replica(index, steps, out):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from _models import torch_mlp
    dev = torch_xla.device()
    model, data, target, loss_fn = torch_mlp(BATCH // xr.world_size())
    model, data, target = model.to(dev), data.to(dev), target.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        xm.optimizer_step(opt)
        xm.mark_step()
    secs = median_step(step, xm.wait_device_ops, steps)
    if index == 0:
        with open(out, "w") as f:
            json.dump(secs, f)


def point_multiprocess(steps):
    import tempfile
    import torch_xla
    out = os.path.join(tempfile.mkdtemp(), "mp.json")
    torch_xla.launch(_mp_replica, args=(steps, out))
    with open(out) as f:
        return json.load(f)


def point_jax(steps):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from _models import jax_mlp
    step_fn, (params, bufs, x, y) = jax_mlp(BATCH)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    y = jax.device_put(y, NamedSharding(mesh, P("data")))
    rep = NamedSharding(mesh, P())
    params, bufs = jax.device_put((params, bufs), rep)
    holder = {"s": (params, bufs, x, y)}

    def step():
        holder["s"] = step_fn(*holder["s"])

    return median_step(step, lambda: jax.block_until_ready(holder["s"]), steps)


POINTS = {"spmd": point_spmd, "multiprocess": point_multiprocess, "jax": point_jax}


def _run(kind, n, steps):
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(n), "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
    r = run_point(__file__, ["--point", kind, "--steps", str(steps)], env, timeout=1200)
    return (None, r["error"]) if "error" in r else (r["secs"], None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--point", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.point:
        print(json.dumps({"secs": POINTS[a.point](a.steps)}))
        return 0
    steps = 5 if a.quick else a.steps
    print(f"data-parallel MLP 4x512, global batch {BATCH}, SGD momentum; ms/step (median of 3 x {steps} steps)")
    print(f"  {'devices':<9}{'SPMD':>9}{'multi-process':>15}{'pure JAX':>10}{'SPMD/JAX':>10}   target <= 1.15")
    for n in a.devices:
        row = {}
        for kind in ("spmd", "multiprocess", "jax"):
            if kind == "multiprocess" and n == 1:
                row[kind] = (None, "n/a")
                continue
            row[kind] = _run(kind, n, steps)
        cells = [f"{row[k][0] * 1e3:.2f}" if row[k][0] else (row[k][1] or "-")[:12] for k in ("spmd", "multiprocess", "jax")]
        ratio = f"{row['spmd'][0] / row['jax'][0]:.2f}" if row["spmd"][0] and row["jax"][0] else "-"
        print(f"  {n:<9}{cells[0]:>9}{cells[1]:>15}{cells[2]:>10}{ratio:>10}", flush=True)
        for k in ("spmd", "multiprocess", "jax"):
            if row[k][0] is None and row[k][1] not in (None, "n/a"):
                print(f"    {k} failed: {row[k][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
