"""Train a small GPT-2-style model with Hugging Face's `transformers.Trainer` on the XLA device.

    python examples/train_hf_gpt2.py                      # one process, xla:0
    python examples/train_hf_gpt2.py --nprocs 4           # torch_xla.launch, 4 processes (PJRT_DEVICE=CPU)
    USE_TORCH_XLA=0 python examples/train_hf_gpt2.py      # the same run in eager PyTorch on the CPU

The model is built from a config (no download) and trained on fixed random token sequences,
in order (train_sampling_strategy="sequential", no dropout), so runs are comparable: with
--nprocs N and --batch B the job takes the same steps as one process with batch N*B.
Prints one `step <n> loss <value>` line per step (the loss averaged over the replicas), and
with --out writes them as JSON."""
import argparse
import json
import os
import sys


def build(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, config.vocab_size, (args.samples, args.seq_len), generator=g)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return len(tokens)

        def __getitem__(self, i):
            return {"input_ids": tokens[i], "labels": tokens[i]}

    return model, Tokens()


def train(index, args):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    model, dataset = build(args)
    losses = []

    class Record(TrainerCallback):
        def on_log(self, targs, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append((state.global_step, float(logs["loss"])))

    targs = TrainingArguments(
        output_dir=os.path.join(args.workdir, "out"), max_steps=args.steps,
        per_device_train_batch_size=args.batch, learning_rate=args.lr, optim="adamw_torch",
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, logging_steps=1,
        save_strategy="no", report_to=[], seed=0, data_seed=0, dataloader_num_workers=0,
        dataloader_pin_memory=True, train_sampling_strategy="sequential", disable_tqdm=True,
        logging_strategy="steps")
    trainer = Trainer(model=model, args=targs, train_dataset=dataset, callbacks=[Record()])
    # transformers.Trainer moves the model to the device and re-ties its weights on XLA
    assert model.lm_head.weight is model.transformer.wte.weight, "tied weights were untied"
    trainer.train()
    device = str(next(model.parameters()).device)
    if targs.process_index == 0:
        for step, loss in losses:
            print(f"step {step} loss {loss:.6f}", flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"device": device, "world": targs.world_size, "losses": [l for _, l in losses]}, f)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workdir", default="/tmp/train_hf_gpt2")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.nprocs > 1:
        import torch_xla
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        os.environ.setdefault("CPU_NUM_DEVICES", str(args.nprocs))
        torch_xla.launch(train, args=(args,))
    else:
        train(0, args)


if __name__ == "__main__":
    sys.exit(main())
