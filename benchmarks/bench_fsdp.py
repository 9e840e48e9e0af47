"""FSDP against data-parallel training on 4 CPU processes, in one run.

    python benchmarks/bench_fsdp.py [--procs 4] [--quick] [--no-memory]

Speed: the GPT decoder of _models.torch_gpt (d=256, 4 layers, vocab 4096,
seq 64, batch 4 per process, AdamW), samples/s over all processes and ms per
step (median of 3 x N steps) of:
  - DDP: every process holds the whole model, `xm.optimizer_step`;
  - FSDP ZeRO-2: XlaFullyShardedDataParallel(reshard_after_forward=False), each
    TransformerEncoderLayer wrapped on its own (transformer_auto_wrap_policy);
  - FSDP ZeRO-3: the same with reshard_after_forward=True.
Target: the ZeRO-3 step <= 1.5x the DDP step.

Memory: a 60 M-parameter GPT (d=640, 8 layers, vocab 32000), 2 AdamW steps
under DDP and ZeRO-3, then per process: parameter bytes, optimizer-state bytes
and the bytes of every live device buffer (jax.live_arrays(), between steps),
and the peak that xm.get_memory_info() reports (on the CPU: the process's peak
RSS). Target: ZeRO-3 holds about 1/4 of DDP's parameter and state bytes.
Every point runs in fresh processes (torch_xla.launch, CPU_NUM_DEVICES=procs).
"""
import argparse
import functools
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import median_step, run_point  # noqa: E402

SPEED = dict(seq=64, vocab=4096, d=256, heads=4, layers=4)
MEMORY = dict(seq=64, vocab=32000, d=640, heads=8, layers=8)
BATCH = 4


def _build(mode, cfg):
    import torch
    import torch.nn as nn
    import torch_xla
    from _models import torch_gpt
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    dev = torch_xla.device()
    model, x, y, loss_fn = torch_gpt(BATCH, **cfg)
    if mode == "ddp":
        model = model.to(dev)
    else:
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.TransformerEncoderLayer})
        model = FSDP(model, reshard_after_forward=(mode == "zero3"), auto_wrap_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt, x.to(dev), y.to(dev), loss_fn


def _replica(index, mode, kind, steps, out):
    import jax
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    cfg = SPEED if kind == "speed" else MEMORY
    model, opt, x, y, loss_fn = _build(mode, cfg)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        if mode == "ddp":
            xm.optimizer_step(opt)
        else:
            opt.step()
        xm.mark_step()

    rec = {"params": sum(p.numel() for p in model.parameters()) * (xr.world_size() if mode != "ddp" else 1)}
    if kind == "speed":
        rec["secs"] = median_step(step, xm.wait_device_ops, steps, warmup=2)
    else:
        for _ in range(2):
            step()
        xm.wait_device_ops()
        rec["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        rec["state_bytes"] = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                                 if torch.is_tensor(t) and t.dim() > 0)
        rec["live_bytes"] = sum(a.nbytes for a in jax.live_arrays())
        rec["peak_bytes"] = xm.get_memory_info()["peak_bytes_used"]
    lines = xm.rendezvous("bench_fsdp", json.dumps(rec).encode())
    if index == 0:
        with open(out, "w") as f:
            json.dump([json.loads(line) for line in lines], f)


def point(mode, kind, steps):
    import torch_xla
    out = os.path.join(tempfile.mkdtemp(), "r.json")
    torch_xla.launch(_replica, args=(mode, kind, steps, out))
    with open(out) as f:
        return json.load(f)


def _mb(b):
    return f"{b / 2**20:.1f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="2 steps per timing run, no memory part")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--point", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    steps = 2 if a.quick else a.steps
    if a.point:
        print(json.dumps({"ranks": point(a.point[0], a.point[1], steps)}))
        return 0
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(a.procs)}

    def run(mode, kind):
        r = run_point(__file__, ["--point", mode, kind, "--steps", str(steps)], env, timeout=1800)
        return r.get("ranks"), r.get("error")

    print(f"GPT d={SPEED['d']} x{SPEED['layers']} layers, vocab {SPEED['vocab']}, seq {SPEED['seq']}, "
          f"batch {BATCH}/process, AdamW, {a.procs} CPU processes; median of 3 x {steps} steps")
    print(f"  {'mode':<12}{'params':>10}{'ms/step':>10}{'samples/s':>11}{'x DDP':>8}   target ZeRO-3 <= 1.5")
    base = None
    for mode, label in (("ddp", "DDP"), ("zero2", "FSDP ZeRO-2"), ("zero3", "FSDP ZeRO-3")):
        ranks, err = run(mode, "speed")
        if err:
            print(f"  {label:<12} failed: {err}")
            continue
        secs = max(r["secs"] for r in ranks)
        base = base or secs
        print(f"  {label:<12}{ranks[0]['params'] / 1e6:>9.2f}M{secs * 1e3:>10.1f}"
              f"{BATCH * a.procs / secs:>11.1f}{secs / base:>8.2f}", flush=True)
    if a.quick or a.no_memory:
        return 0
    print(f"\nmemory: GPT d={MEMORY['d']} x{MEMORY['layers']}, vocab {MEMORY['vocab']}; "
          "per process after 2 AdamW steps, MiB")
    print(f"  {'mode':<12}{'params':>10}{'param MiB':>11}{'state MiB':>11}{'live buffers':>14}{'peak':>10}")
    rows = {}
    for mode, label in (("ddp", "DDP"), ("zero3", "FSDP ZeRO-3")):
        ranks, err = run(mode, "memory")
        if err:
            print(f"  {label:<12} failed: {err}")
            continue
        r = max(ranks, key=lambda r: r["live_bytes"])
        rows[mode] = r
        print(f"  {label:<12}{r['params'] / 1e6:>9.1f}M{_mb(r['param_bytes']):>11}{_mb(r['state_bytes']):>11}"
              f"{_mb(r['live_bytes']):>14}{_mb(r['peak_bytes']):>10}", flush=True)
    if len(rows) == 2:
        d, z = rows["ddp"], rows["zero3"]
        print(f"  ZeRO-3 / DDP: parameters {z['param_bytes'] / d['param_bytes']:.3f}, optimizer state "
              f"{z['state_bytes'] / d['state_bytes']:.3f}, live buffers {z['live_bytes'] / d['live_bytes']:.3f}"
              f"   target about {1 / a.procs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
