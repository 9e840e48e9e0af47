"""Run by test_accelerate.py: transformers.Trainer.predict/evaluate over 101 samples on
torch_xla.launch replicas; the main replica prints the predictions it got back."""
import json
import sys

import torch

import torch_xla


class Samples(torch.utils.data.Dataset):
    def __len__(self):
        return 101

    def __getitem__(self, i):
        return {"x": torch.tensor([float(i)]), "labels": torch.tensor([float(i)])}


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x, labels=None):
        out = x * self.w
        return {"loss": ((out - labels) ** 2).mean(), "logits": out}


def run(index, workdir):
    import torch_xla.runtime as xr
    from transformers import Trainer, TrainingArguments
    args = TrainingArguments(output_dir=workdir, per_device_eval_batch_size=4, report_to=[])
    trainer = Trainer(model=Scale(), args=args)
    pred = trainer.predict(Samples())
    metrics = trainer.evaluate(Samples())
    if xr.global_ordinal() == 0:
        print("RESULT " + json.dumps({"predictions": pred.predictions.reshape(-1).tolist(),
                                      "eval_loss": metrics["eval_loss"], "world": xr.world_size()}))
        sys.stdout.flush()


if __name__ == "__main__":
    torch_xla.launch(run, args=(sys.argv[1],))
