"""Steps that skip Python tracing, side by side in one run.

[training] one step of the MLP and the MNIST CNN (SGD momentum) and of a small GPT
(AdamW), and [inference] the loss of one forward pass of each, five ways:
  * lazy: per-op tracing every step, then xm.mark_step() (the cached executable runs)
  * torch_xla.compile(fn, replay=True): the step's executable replayed, no tracing
  * torch.compile(backend="openxla") (training: model and optimizer step compiled;
    forward, backward and optimizer graphs replayed by the dynamo bridge) or
    backend="openxla_eval" (inference)
  * pure JAX: jax.jit of the same model and step, the same shapes
  * eager PyTorch on the CPU
[inference, batch 1] GPT next-token logits: lazy tracing vs openxla_eval and replay.

The machine is noisy: the competitors are timed round-robin (5 rounds of N
steps each) and each keeps its best round, so load drifts hit all alike.

Usage: python benchmarks/bench_dynamo.py [--steps N] [--quick]
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

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


TRAIN = (("mlp", 256, "MLP 4x512, batch 256"), ("mnist", 64, "MNIST CNN, batch 64"),
         ("gpt", 8, "GPT 2x128, 64 tok, batch 8"))


def _parts(kind, batch, on_xla):
    """(model, data, target, loss_fn, optimizer), on the XLA device or the CPU. The MLP
    and the CNN train with SGD momentum, the GPT with AdamW (its step count on the
    device when on XLA, so a replayed step is exact), as their JAX versions do."""
    import torch
    from _models import torch_gpt
    if kind == "gpt":
        model, data, target, loss_fn = torch_gpt(batch, blocks="explicit")
    else:
        model, data, target, loss_fn = (torch_mlp if kind == "mlp" else torch_mnist)(batch)
    if on_xla:
        import torch_xla
        dev = torch_xla.device()
        model, data, target = model.to(dev), data.to(dev), target.to(dev)
    if kind == "gpt":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, capturable=on_xla)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, data, target, loss_fn, opt


def lazy_step(kind, batch):
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, opt = _parts(kind, batch, True)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()
        xm.mark_step()
    return step, xm.wait_device_ops


def jax_step(kind, batch):
    import jax
    from _models import jax_gpt, jax_mlp, jax_mnist
    if kind == "gpt":
        step_fn, state = jax_gpt(batch)
        holder = {"s": state}

        def step():
            holder["s"] = step_fn(holder["s"])
    else:
        step_fn, state = (jax_mlp if kind == "mlp" else jax_mnist)(batch)
        holder = {"s": state}

        def step():
            holder["s"] = step_fn(*holder["s"])
    return step, lambda: jax.block_until_ready(holder["s"])


def eager_step(kind, batch):
    model, data, target, loss_fn, opt = _parts(kind, batch, False)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()
    return step, lambda: None


def _until_replayed(fn, counter, per_call=1, calls=6):
    import torch_xla.debug.metrics as met
    for _ in range(calls):   # replay starts once two traced calls captured the same graph
        r0 = met.counter_value(counter) or 0
        fn()
        if (met.counter_value(counter) or 0) == r0 + per_call:
            return
    raise AssertionError(f"no replay: {counter} did not grow by {per_call}")


def compile_replay_step(kind, batch):
    import torch_xla
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, opt = _parts(kind, batch, True)

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = torch_xla.compile(step, replay=True)
    _until_replayed(lambda: step(data, target), "CompiledFnReplayed")
    return (lambda: step(data, target)), xm.wait_device_ops


def dynamo_train_step(kind, batch):
    import torch
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, opt = _parts(kind, batch, True)
    cmodel = torch.compile(model, backend="openxla")
    copt_step = torch.compile(opt.step, backend="openxla")

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(cmodel(data), target).backward()
        copt_step()

    for _ in range(2):
        step()
    _until_replayed(step, "DynamoGraphNode", per_call=3, calls=3)
    return step, xm.wait_device_ops


# inference: the loss of one forward pass, no gradients

def _loss_of(model, loss_fn):
    def f(x, y):
        return loss_fn(model(x), y)
    return f


def lazy_infer(kind, batch):
    import torch
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, _ = _parts(kind, batch, True)
    f = _loss_of(model.eval(), loss_fn)
    held = {}

    def step():
        with torch.no_grad():
            held["out"] = f(data, target)   # alive at the barrier, so it is computed
        xm.mark_step()
    return step, xm.wait_device_ops


def replay_infer(kind, batch):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, _ = _parts(kind, batch, True)
    f = torch_xla.compile(_loss_of(model.eval(), loss_fn), replay=True)
    held = {}

    def step():
        with torch.no_grad():
            held["out"] = f(data, target)
    _until_replayed(step, "CompiledFnReplayed")
    return step, xm.wait_device_ops


def dynamo_infer(kind, batch):
    import torch
    import torch_xla.core.xla_model as xm
    model, data, target, loss_fn, _ = _parts(kind, batch, True)
    f = torch.compile(_loss_of(model.eval(), loss_fn), backend="openxla_eval")
    held = {}

    def step():
        with torch.no_grad():
            held["out"] = f(data, target)
    for _ in range(2):
        step()
    _until_replayed(step, "DynamoGraphNode", calls=2)
    return step, xm.wait_device_ops


def jax_infer(kind, batch):
    import jax
    from _models import jax_gpt, jax_mlp, jax_mnist
    if kind == "gpt":
        _, state, loss_fn = jax_gpt(batch, with_loss=True)
        args = (state[0], state[4], state[5])
    else:
        _, (params, _, x, y), loss_fn = (jax_mlp if kind == "mlp" else jax_mnist)(batch, with_loss=True)
        args = (params, x, y)
    f = jax.jit(loss_fn)
    holder = {}

    def step():
        holder["out"] = f(*args)
    return step, lambda: jax.block_until_ready(holder.get("out"))


def eager_infer(kind, batch):
    import torch
    model, data, target, loss_fn, _ = _parts(kind, batch, False)
    f = _loss_of(model.eval(), loss_fn)

    def step():
        with torch.no_grad():
            f(data, target)
    return step, lambda: None


def _gpt(vocab=256, d=128, heads=4, layers=4, ctx=64):
    """The benchmarks' explicit GPT decoder (eval mode) and one batch-1 context."""
    from _models import torch_gpt
    model, idx, _, _ = torch_gpt(1, seq=ctx, vocab=vocab, d=d, heads=heads, layers=layers, blocks="explicit")
    return model.eval(), idx


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

        held = {}

        def lazy():
            held["out"] = model(idx)   # alive at the barrier, so it is computed
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

    cols = ("lazy", "compile", "openxla", "jax", "eager")
    head = (f"  {'model':<28}{'lazy':>9}{'compile':>9}{'openxla':>9}{'JAX':>9}{'eager':>9}"
            f"{'compile/JAX':>13}{'openxla/JAX':>13}{'lazy/JAX':>10}")

    def row(name, t):
        lz, rp, dy, jx, ea = (t[k] for k in cols)
        print(f"  {name:<28}{lz*1e3:>9.2f}{rp*1e3:>9.2f}{dy*1e3:>9.2f}{jx*1e3:>9.2f}{ea*1e3:>9.2f}"
              f"{rp/jx:>13.2f}{dy/jx:>13.2f}{lz/jx:>10.2f}", flush=True)

    sections = (
        ("[training step] MLP and CNN: SGD momentum; GPT: AdamW",
         (lazy_step, compile_replay_step, dynamo_train_step, jax_step, eager_step),
         "compile = torch_xla.compile(step, replay=True); openxla = torch.compile(model) and "
         "torch.compile(opt.step); target compile/JAX <= 1.05"),
        ("[inference] the loss of one forward pass, no gradients",
         (lazy_infer, replay_infer, dynamo_infer, jax_infer, eager_infer),
         'compile = torch_xla.compile(forward, replay=True); openxla = torch.compile(forward, '
         'backend="openxla_eval")'))
    for title, makers, note in sections:
        print("\n" + title)
        print(head)
        for kind, batch, name in TRAIN:
            row(name, race({c: make(kind, batch) for c, make in zip(cols, makers)}, steps))
        print("  " + note)

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
