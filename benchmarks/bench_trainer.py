"""Hugging Face `transformers.Trainer` on a tiny GPT-2 (built from a config), 20 steps,
on torch_xla and on eager PyTorch on the CPU, side by side in one run.

    python benchmarks/bench_trainer.py [--steps 20] [--quick]

Each competitor runs in a fresh process with the Trainer's defaults (its default optimizer
included). Printed per competitor: the wall time of `trainer.train()`, the graphs compiled
by the end of the first and second steps, the compiles per step after that (0 means nothing
recompiles), and the ratio of wall time to eager CPU.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _timing import run_point  # noqa: E402


def worker(steps, on_xla):
    import tempfile

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    compiles = []

    def compiled_so_far():
        if not on_xla:
            return 0
        import torch_xla.debug.metrics as met
        return met.counter_value("UncachedCompile") or 0

    class Count(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if on_xla:
                import torch_xla
                torch_xla.sync()
            compiles.append(compiled_so_far())

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(1, 128, (256, 16), generator=torch.Generator().manual_seed(1))

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return len(tokens)

        def __getitem__(self, i):
            return {"input_ids": tokens[i], "labels": tokens[i]}

    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(output_dir=tmp, max_steps=steps, per_device_train_batch_size=8,
                                  logging_steps=5, save_strategy="no", report_to=[], seed=0,
                                  disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=[Count()])
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
    after_two = compiles[1] if len(compiles) > 1 else compiles[-1]
    late = (compiles[-1] - after_two) / max(1, len(compiles) - 2)
    print(json.dumps({"wall": wall, "steps": len(compiles), "first": compiles[0], "second": after_two,
                      "per_step_after": late, "total": compiles[-1], "by_step": compiles, "optim": targs.optim.value
                      if hasattr(targs.optim, "value") else str(targs.optim),
                      "device": str(next(model.parameters()).device)}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="5 steps (CI-sized)")
    p.add_argument("--worker", choices=["xla", "eager"])
    a = p.parse_args()
    steps = 5 if a.quick else a.steps
    if a.worker:
        worker(steps, a.worker == "xla")
        return
    base = ["--steps", str(steps)]
    rows = {}
    for name, env in (("eager", {"USE_TORCH_XLA": "0"}), ("torch_xla", {"PJRT_DEVICE": "CPU"})):
        t0 = time.perf_counter()
        rows[name] = run_point(__file__, base + ["--worker", name if name == "eager" else "xla"], env=env)
        rows[name]["process"] = time.perf_counter() - t0
    import platform
    print(f"transformers.Trainer, tiny GPT-2 (2 layers, d=64, batch 8, seq 16), {steps} steps; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    eager, eager_proc = rows["eager"].get("wall"), rows["eager"].get("process")
    print(f"  {'':10s} {'train s':>8s} {'vs eager':>8s} {'process s':>9s} {'vs eager':>8s} {'graphs@1':>8s} "
          f"{'graphs@2':>8s} {'compiles/step after':>20s}  optimizer")
    for name, r in rows.items():
        if "error" in r:
            print(f"  {name:10s} error: {r['error']}")
            continue
        ratio = r["wall"] / eager if eager else float("nan")
        pratio = r["process"] / eager_proc if eager_proc else float("nan")
        print(f"  {name:10s} {r['wall']:8.2f} {ratio:8.2f} {r['process']:9.2f} {pratio:8.2f} {r['first']:8d} "
              f"{r['second']:8d} {r['per_step_after']:20.2f}  {r['optim']} on {r['device']}")
    xla = rows["torch_xla"]
    if "by_step" in xla:
        print(f"  torch_xla graphs compiled by the end of each step: {xla['by_step']}")


if __name__ == "__main__":
    main()
