"""Steps that skip Python tracing, side by side in one run.

[training] one SGD-momentum step of the MLP and the MNIST CNN:
  * lazy: per-op tracing every step, then xm.mark_step() (the cached executable runs)
  * torch_xla.compile(step, replay=True): the step's executable replayed, no tracing
  * torch.compile(model, backend="openxla") with the optimizer step compiled too:
    forward, backward and optimizer graphs replayed by the dynamo bridge
  * pure JAX: jax.jit(value_and_grad + SGD momentum), the same shapes
  * eager PyTorch on the CPU
[inference] a small GPT, batch 1: lazy tracing vs torch.compile(backend="openxla_eval")
  and torch_xla.compile(forward, replay=True).

The machine is noisy: the competitors are timed round-robin (5 rounds of N
steps each) and each keeps its best round, so load drifts hit all alike.

Usage: python benchmarks/bench_dynamo.py [--steps N] [--quick]
"""
import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_core import _torch_step  # noqa: E402
from _models import torch_mlp, torch_mnist  # noqa: E402


def _xla_setup(kind, batch):
    import torch
    import torch_xla
    dev = torch_xla.device()
    model, data, target, loss_fn = (torch_mlp if kind == "mlp" else torch_mnist)(batch)
    model, data, target = model.to(dev), data.to(dev), target.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, data, target, loss_fn, opt


def race(competitors, n, rounds=5, warmup=4):
    """Best time per step of each competitor, measured round-robin so that the
    machine's load drifts over all of them alike. competitors: name -> (step, sync)."""
    for step, sync in competitors.values():
        for _ in range(warmup):
            step()
        sync()
    best = {k: float("inf") for k in competitors}
    for _ in range(rounds):
        for k, (step, sync) in competitors.items():
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            sync()
            best[k] = min(best[k], (time.perf_counter() - t0) / n)
    return best


def lazy_step(kind, batch):
    import torch_xla.core.xla_model as xm
    return _torch_step(kind, batch, True), xm.wait_device_ops


def jax_step(kind, batch):
    import jax
    from _models import jax_mlp, jax_mnist
    step_fn, state = (jax_mlp if kind == "mlp" else jax_mnist)(batch)
    holder = {"s": state}

    def step():
        holder["s"] = step_fn(*holder["s"])
    return step, lambda: jax.block_until_ready(holder["s"])


def eager_step(kind, batch):
    return _torch_step(kind, batch, False), lambda: None


def compile_replay_step(kind, batch):
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    model, data, target, loss_fn, opt = _xla_setup(kind, batch)

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = torch_xla.compile(step, replay=True)
    for _ in range(6):   # replay starts once two traced calls captured the same graph
        r0 = met.counter_value("CompiledFnReplayed") or 0
        step(data, target)
        if (met.counter_value("CompiledFnReplayed") or 0) == r0 + 1:
            break
    else:
        raise AssertionError("torch_xla.compile replay did not engage")
    return (lambda: step(data, target)), xm.wait_device_ops


def dynamo_train_step(kind, batch):
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    model, data, target, loss_fn, opt = _xla_setup(kind, batch)
    cmodel = torch.compile(model, backend="openxla")
    copt_step = torch.compile(opt.step, backend="openxla")

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(cmodel(data), target).backward()
        copt_step()

    for _ in range(3):
        step()
    r0 = met.counter_value("DynamoReplayedGraph") or 0
    step()
    replayed = (met.counter_value("DynamoReplayedGraph") or 0) - r0
    assert replayed == 3, f"openxla: {replayed} of 3 graphs replayed"
    return step, xm.wait_device_ops


def _gpt(vocab=256, d=128, heads=4, layers=4, ctx=64):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    torch.manual_seed(0)
    return GPT().eval(), torch.randint(0, vocab, (1, ctx))


def bench_gpt_inference(steps, **size):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    dev = torch_xla.device()
    model, idx = _gpt(**size)
    want = model(idx)
    model, idx = model.to(dev), idx.to(dev)
    compiled = torch.compile(model, backend="openxla_eval")
    with torch.no_grad():
        got_lazy = model(idx)
        xm.mark_step()
        got_dyn = compiled(idx)
        for got in (got_lazy, got_dyn):
            torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-4)

        def lazy():
            model(idx)
            xm.mark_step()

        replayed = torch_xla.compile(lambda i: model(i), replay=True)
        torch.testing.assert_close(replayed(idx).cpu(), want.detach(), rtol=1e-4, atol=1e-4)
        t = race({"lazy": (lazy, xm.wait_device_ops),
                  "dynamo": (lambda: compiled(idx), xm.wait_device_ops),
                  "replay": (lambda: replayed(idx), xm.wait_device_ops)}, steps)
        t_lazy, t_dyn, t_rep = t["lazy"], t["dynamo"], t["replay"]
    return t_lazy, t_dyn, t_rep


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    steps = 8 if a.quick else a.steps
    import jax
    import torch
    torch._dynamo.config.cache_size_limit = 64
    print(f"machine: {os.cpu_count()} cores; torch_xla on JAX {jax.__version__}; ms per step, best of 5 round-robin runs")

    print("\n[training step] SGD momentum")
    print(f"  {'model':<24}{'lazy':>9}{'compile':>9}{'openxla':>9}{'JAX':>9}{'eager':>9}"
          f"{'compile/JAX':>13}{'openxla/JAX':>13}{'lazy/JAX':>10}")
    for kind, batch, name in (("mlp", 256, "MLP 4x512, batch 256"), ("mnist", 64, "MNIST CNN, batch 64")):
        t = race({"lazy": lazy_step(kind, batch), "compile": compile_replay_step(kind, batch),
                  "openxla": dynamo_train_step(kind, batch), "jax": jax_step(kind, batch),
                  "eager": eager_step(kind, batch)}, steps)
        lz, rp, dy, jx, ea = (t[k] for k in ("lazy", "compile", "openxla", "jax", "eager"))
        print(f"  {name:<24}{lz*1e3:>9.2f}{rp*1e3:>9.2f}{dy*1e3:>9.2f}{jx*1e3:>9.2f}{ea*1e3:>9.2f}"
              f"{rp/jx:>13.2f}{dy/jx:>13.2f}{lz/jx:>10.2f}")
    print("  compile = torch_xla.compile(step, replay=True); openxla = torch.compile(model) and "
          "torch.compile(opt.step); target compile/JAX <= 1.05")

    print("\n[inference] GPT, batch 1, next-token logits over the whole context")
    for name, size in (("small GPT: 2 layers, d=64, 32 tokens", dict(d=64, layers=2, ctx=32)),
                       ("GPT: 4 layers, d=128, 64 tokens", dict(d=128, layers=4, ctx=64))):
        t_lazy, t_dyn, t_rep = bench_gpt_inference(steps * 2, **size)
        print(f"  {name:<38} lazy {t_lazy*1e3:6.2f} ms   openxla_eval {t_dyn*1e3:6.2f} ms   "
              f"compile(replay) {t_rep*1e3:6.2f} ms   lazy/openxla_eval {t_lazy/t_dyn:5.2f}x   "
              f"lazy/replay {t_lazy/t_rep:5.2f}x")
    print("  target: small GPT >= 3x (the larger one is bound by the executable's own time)")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\n({time.time() - t0:.0f} s)")
