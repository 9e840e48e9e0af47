"""Mixed precision and scan_layers, measured side by side in one run.

    python benchmarks/bench_precision.py [--quick]

1. The small GPT's training step (AdamW) in fp32 and under bf16 autocast, on
   torch_xla, on eager CPU and in pure JAX (bf16 parameters for the forward
   pass), with the bf16/fp32 ratio of each.
2. Compile time of a stack of identical transformer layers, unrolled against
   `torch_xla.experimental.scan_layers` (one loop body), at 8 and 32 layers:
   time from a fresh graph to its first result (forward and backward: trace,
   compile, first run) and the compile time alone (the step graph's
   `CompileTime` metric: lowering and XLA compile), each point in a fresh
   process after a warm-up compile.

On XLA:CPU bf16 is emulated (converted around each op), so bf16 is not expected
to be faster here; on a GPU or TPU it is. The scan figure is the one that
carries over between platforms.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import median_step, run_point  # noqa: E402


def _gpt_step(on_xla, bf16, steps, batch=8):
    import torch
    from _models import torch_gpt
    model, idx, tgt, loss_fn = torch_gpt(batch)
    if on_xla:
        import torch_xla
        import torch_xla.core.xla_model as xm
        dev = torch_xla.device()
        model, idx, tgt = model.to(dev), idx.to(dev), tgt.to(dev)
        kind, barrier, sync = "xla", xm.mark_step, xm.wait_device_ops
    else:
        kind, barrier, sync = "cpu", (lambda: None), (lambda: None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(idx), tgt)
        loss.backward()
        opt.step()
        barrier()

    return median_step(step, sync, steps)


def _jax_gpt_step(bf16, steps, batch=8):
    """The same GPT and AdamW step in pure JAX; bf16 casts the parameters for the
    forward pass as autocast does."""
    import jax
    import jax.numpy as jnp
    from _models import jax_gpt
    step_fn, state = jax_gpt(batch, compute_dtype=jnp.bfloat16 if bf16 else None)
    holder = {"s": state}

    def step():
        holder["s"] = step_fn(holder["s"])
    return median_step(step, lambda: jax.block_until_ready(holder["s"]), steps)


def _stack_compile(layers, use_scan, d=128, seq=64, batch=4):
    """use_scan: False (unrolled), True (scan_layers), "remat" (scan_layers with a
    rematerializing partitioner: only carries saved, the backward recomputes)."""
    import torch
    import torch.nn as nn
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    from torch_xla.experimental.scan_layers import scan_layers
    dev = torch_xla.device()
    warm = torch.ones(8, device=dev)
    (warm * 2).sum().item()
    torch.manual_seed(0)
    stack = nn.ModuleList(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
                          for _ in range(layers)).to(dev)
    x = torch.randn(batch, seq, d).to(dev)
    xm.mark_step()
    xm.wait_device_ops()
    met.clear_all()
    t0 = time.perf_counter()
    if use_scan == "remat":
        from functorch.compile import min_cut_rematerialization_partition
        h = scan_layers(stack, x, partition_fn=min_cut_rematerialization_partition)
    elif use_scan:
        h = scan_layers(stack, x)
    else:
        h = x
        for layer in stack:
            h = layer(h)
    h.pow(2).mean().backward()
    grads = [p.grad for p in stack.parameters()]
    xm.mark_step()
    torch_xla.sync()
    xm.wait_device_ops()
    assert all(g is not None for g in grads)
    first = time.perf_counter() - t0
    compiled = met.metric_data("CompileTime")
    return [first, (compiled[1] if compiled else 0) / 1e9]


def _in_process(kind, *args):
    r = run_point(__file__, ["--point", json.dumps([kind, *args])])
    if "error" in r:
        raise RuntimeError(f"{kind}{args}: {r['error']}")
    return r["value"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer steps; stacks of 2 and 4 layers")
    p.add_argument("--point", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.point:
        kind, *args = json.loads(a.point)
        value = {"gpt": _gpt_step, "jax_gpt": _jax_gpt_step, "stack": _stack_compile}[kind](*args)
        print(json.dumps({"value": value}))
        return 0

    steps = 3 if a.quick else 10
    print("[bf16 autocast vs fp32] small GPT (2 layers, d=128, seq 64, batch 8), AdamW, ms/step")
    print(f"  {'':<12}{'fp32':>10}{'bf16':>10}{'bf16/fp32':>11}")
    for name, point in (("torch_xla", ("gpt", True)), ("eager CPU", ("gpt", False)), ("pure JAX", ("jax_gpt",))):
        fp32 = _in_process(*point, False, steps)
        bf16 = _in_process(*point, True, steps)
        print(f"  {name:<12}{fp32 * 1e3:>10.2f}{bf16 * 1e3:>10.2f}{bf16 / fp32:>11.2f}", flush=True)

    depths = (2, 4) if a.quick else (8, 32)
    print("\n[scan_layers vs unrolled] transformer stack (d=128, seq 64, batch 4), forward + backward, "
          "seconds: to the first result (trace + compile + run) and compile alone (CompileTime)   "
          "target: scan compiles >= 3x faster")
    print(f"  {'layers':<8}{'':<9}{'unrolled':>10}{'scan':>10}{'scan+remat':>12}{'unrolled/scan':>15}"
          f"{'unrolled/remat':>16}")
    for n in depths:
        points = [_in_process("stack", n, kind) for kind in (False, True, "remat")]
        for k, what in enumerate(("first", "compile")):
            u, s_, r = (p[k] for p in points)
            print(f"  {n if k == 0 else '':<8}{what:<9}{u:>10.2f}{s_:>10.2f}{r:>12.2f}{u / s_:>15.2f}"
                  f"{u / r:>16.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
