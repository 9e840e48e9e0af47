"""A GPT-style training step on every competitor, side by side in one run.

    python benchmarks/bench_gpt.py            # CUDA when torch and JAX see a GPU, else the CPU config
    python benchmarks/bench_gpt.py --quick    # CI-sized (a test runs this)
    python benchmarks/bench_gpt.py --config gpu --steps 20

Competitors, each in a fresh process so none inherits another's allocator or
threads: torch_xla (this package), pure JAX (the same decoder, hand-written
AdamW, one jitted step), eager PyTorch on the same device, and torch.compile
(inductor) where CUDA is present (or with --inductor). The GPU configuration is
a ~110 M-parameter decoder trained with bf16 autocast; the CPU ones are small
and fp32 (XLA:CPU emulates bf16). Printed: step time, tokens/s, and each
competitor's ratio to torch_xla.

Only documented APIs are used for CUDA: torch.cuda.is_available /
torch.cuda.synchronize / torch.autocast, jax.devices("gpu"), and PJRT_DEVICE=CUDA
for torch_xla.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import median_step, run_point  # noqa: E402

CONFIGS = {
    "gpu": dict(vocab=32768, d=768, heads=12, layers=12, seq=512, batch=8, bf16=True),
    "cpu": dict(vocab=2048, d=256, heads=4, layers=4, seq=128, batch=4, bf16=False),
    "quick": dict(vocab=256, d=64, heads=2, layers=2, seq=32, batch=2, bf16=False),
}


def _torch_parts(cfg, device, capturable=False):
    import torch
    from _models import param_count, torch_gpt
    model, idx, tgt, loss_fn = torch_gpt(cfg["batch"], seq=cfg["seq"], vocab=cfg["vocab"], d=cfg["d"],
                                         heads=cfg["heads"], layers=cfg["layers"])
    model = model.to(device)
    # capturable: the step count stays a device tensor, so no Python value changes per step
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, capturable=capturable)
    return model, idx.to(device), tgt.to(device), loss_fn, opt, param_count(model)


def _torch_step(model, idx, tgt, loss_fn, opt, device_type, bf16, after=lambda: None):
    import torch

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(idx), tgt)
        loss.backward()
        opt.step()
        after()
    return step


def worker_torch_xla(cfg, steps, mode="lazy"):
    """mode: "lazy" (the step traced every time, then xm.mark_step()), "openxla"
    (the model under torch.compile(backend="openxla"), AdamW traced lazily) or
    "replay" (the whole step under torch_xla.compile(replay=True), with
    AdamW(capturable=True): replay needs the step count on the device)."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.runtime as xr
    dev = torch_xla.device()
    model, idx, tgt, loss_fn, opt, n = _torch_parts(cfg, dev, capturable=mode == "replay")
    if mode == "openxla":
        model = torch.compile(model, backend="openxla")
    body = _torch_step(model, idx, tgt, loss_fn, opt, "xla", cfg["bf16"])
    if mode == "replay":
        compiled = torch_xla.compile(body, replay=True)

        def step():
            compiled()
    else:
        def step():
            body()
            xm.mark_step()
    t0 = time.perf_counter()
    step()
    xm.wait_device_ops()
    first = time.perf_counter() - t0
    for _ in range(2):   # Dynamo's traces and the optimizer's state settle
        step()
    xm.wait_device_ops()
    ex0 = (met.metric_data("ExecuteTime") or [0])[0]
    warmup, reps = 3, 3
    secs = median_step(step, xm.wait_device_ops, steps, warmup=warmup, reps=reps)
    executed = ((met.metric_data("ExecuteTime") or [0])[0] - ex0) / (warmup + reps * steps)
    host, trace = [], []   # the host's part, the device idle before: the whole step, and its body alone
    for _ in range(3):
        xm.wait_device_ops()
        c0, t0 = time.thread_time(), time.perf_counter()
        if mode == "replay":
            step()
            c1 = time.thread_time()
        else:
            body()
            c1 = time.thread_time()
            xm.mark_step()
        host.append(time.perf_counter() - t0)
        trace.append(c1 - c0)
    xm.wait_device_ops()
    return {"step": secs, "first": first, "params": n, "device": f"{dev} ({xr.device_type()})",
            "compiles": met.counter_value("UncachedCompile"), "host": sorted(host)[1],
            "trace_cpu": sorted(trace)[1], "executed": executed}


def worker_eager(cfg, steps, compiled=False):
    import torch
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    model, idx, tgt, loss_fn, opt, n = _torch_parts(cfg, dev)
    if compiled:
        model = torch.compile(model)
    step = _torch_step(model, idx, tgt, loss_fn, opt, dev.type, cfg["bf16"])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    return {"step": median_step(step, sync, steps), "first": first, "params": n, "device": str(dev)}


def worker_jax(cfg, steps):
    import jax
    import jax.numpy as jnp
    from _models import jax_gpt
    step_fn, state = jax_gpt(cfg["batch"], seq=cfg["seq"], vocab=cfg["vocab"], d=cfg["d"], heads=cfg["heads"],
                             layers=cfg["layers"], compute_dtype=jnp.bfloat16 if cfg["bf16"] else None)
    holder = {"s": state}

    def step():
        holder["s"] = step_fn(holder["s"])

    def sync():
        jax.block_until_ready(holder["s"])

    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    n = sum(int(a.size) for a in jax.tree_util.tree_leaves(state[0]))
    return {"step": median_step(step, sync, steps), "first": first, "params": n,
            "device": str(jax.devices()[0])}


WORKERS = {"torch_xla": worker_torch_xla, "jax": worker_jax, "eager": worker_eager,
           "openxla": lambda cfg, steps: worker_torch_xla(cfg, steps, "openxla"),
           "replay": lambda cfg, steps: worker_torch_xla(cfg, steps, "replay"),
           "inductor": lambda cfg, steps: worker_eager(cfg, steps, compiled=True)}


def _run_worker(name, cfg, steps, env, timeout):
    return run_point(__file__, ["--worker", name, "--cfg", json.dumps(cfg), "--steps", str(steps)], env, timeout)


def _cuda_present():
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default=None)
    p.add_argument("--quick", action="store_true", help="the CI-sized configuration, few steps")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--inductor", action="store_true", help="also torch.compile (inductor) without CUDA")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--cfg", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(WORKERS[a.worker](json.loads(a.cfg), a.steps)))
        return 0

    cuda = _cuda_present()
    name = a.config or ("quick" if a.quick else ("gpu" if cuda else "cpu"))
    cfg = CONFIGS[name]
    steps = a.steps or (3 if a.quick else 10)
    env = {"PJRT_DEVICE": "CUDA" if cuda else "CPU", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    competitors = ["torch_xla", "openxla", "replay", "jax", "eager"] + (["inductor"] if cuda or a.inductor else [])
    tokens = cfg["batch"] * cfg["seq"]
    print(f"GPT training step, config '{name}': {cfg['layers']} layers, d={cfg['d']}, heads={cfg['heads']}, "
          f"vocab={cfg['vocab']}, batch {cfg['batch']} x seq {cfg['seq']} ({tokens} tokens/step), "
          f"{'bf16 autocast' if cfg['bf16'] else 'fp32'}, AdamW; {'CUDA' if cuda else 'CPU'}; "
          f"{steps} steps per timing, median of 3")
    results = {c: _run_worker(c, cfg, steps, env, timeout=1800) for c in competitors}
    ours = results["torch_xla"].get("step")
    print(f"  {'competitor':<12}{'device':<16}{'params':>12}{'first step s':>14}{'ms/step':>10}{'tokens/s':>11}"
          f"{'x torch_xla':>13}")
    for c in competitors:
        r = results[c]
        if "error" in r:
            print(f"  {c:<12}failed: {r['error']}")
            continue
        ratio = f"{r['step'] / ours:.2f}" if ours else "-"
        print(f"  {c:<12}{r['device'][:15]:<16}{r['params'] / 1e6:>11.1f}M{r['first']:>14.2f}"
              f"{r['step'] * 1e3:>10.2f}{tokens / r['step']:>11.0f}{ratio:>13}")
    for c in ("torch_xla", "openxla", "replay"):
        r = results[c]
        if "compiles" in r:
            print(f"  {c}: {r['compiles']} graphs compiled, {r['executed']:.2f} executables per step; a step "
                  f"launched on an idle device takes {r['host'] * 1e3:.1f} ms of the host "
                  f"({r['trace_cpu'] * 1e3:.1f} ms of CPU before its barrier)")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
