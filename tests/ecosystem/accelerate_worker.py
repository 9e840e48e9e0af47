"""Run by test_accelerate.py under `accelerate launch`: an accelerate loop with gradient
accumulation and gather_for_metrics over 30 samples, printing what the main process saw."""
import json
import sys

import torch
from torch.utils.data import DataLoader


def main():
    from accelerate.accelerator import Accelerator, GradientAccumulationPlugin
    acc = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2))
    data = torch.arange(30, dtype=torch.float32).unsqueeze(1)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, dl = acc.prepare(model, opt, DataLoader(data, batch_size=4))
    seen, syncs, ends = [], [], []
    for x in dl:
        with acc.accumulate(model):
            acc.backward(model(x).pow(2).mean())
            syncs.append(acc.sync_gradients)
            ends.append(acc.gradient_state.end_of_dataloader)
            opt.step()
            opt.zero_grad()
        seen.append(acc.gather_for_metrics(x).cpu())
    if acc.is_main_process:
        print("RESULT " + json.dumps({
            "samples": torch.cat(seen).squeeze(1).tolist(), "syncs": syncs, "ends": ends,
            "processes": acc.num_processes, "device": str(acc.device)}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
