"""Fits a small LightningModule and writes its losses and final weights to a file.

python lightning_fit_worker.py OUT ACCELERATOR DEVICES BATCH [PRECISION] [RESUME_FROM]
Run by test_lightning_xla.py in a fresh process (PJRT_DEVICE decides the XLA devices)."""
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def data(batch):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=False)


def _device(trainer):
    try:
        return str(trainer.strategy.root_device)
    except RuntimeError:  # XLAStrategy in the parent of the spawned replicas
        return "spawned"


def main():
    import pytorch_lightning as pl

    out, accelerator, devices, batch = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
    precision = sys.argv[5] if len(sys.argv) > 5 else "32-true"
    resume = sys.argv[6] if len(sys.argv) > 6 else None

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            with open(f"{out}.losses.{self.global_rank}", "a") as f:
                f.write(f"{float(loss.detach().float())}\n")
            return loss

        def validation_step(self, batch, idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

        def predict_step(self, batch, idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model = Regressor()
    root = os.path.dirname(out)
    trainer = pl.Trainer(accelerator=accelerator, devices=devices, max_epochs=2 if resume is None else 3,
                         precision=precision, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=root)
    trainer.fit(model, data(batch), ckpt_path=resume)
    result = {"weight": model.layer.weight.detach().float().cpu().flatten().tolist(),
              "bias": model.layer.bias.detach().float().cpu().tolist(),
              "device": _device(trainer), "strategy": type(trainer.strategy).__name__,
              "accelerator": type(trainer.accelerator).__name__,
              "precision": type(trainer.precision_plugin).__name__}
    trainer.save_checkpoint(out + ".ckpt")
    result["val"] = trainer.validate(model, data(batch), verbose=False)[0]["val_loss"]
    preds = trainer.predict(model, data(batch))
    if preds is not None:
        result["pred"] = torch.cat([p.float().cpu() for p in preds]).flatten().tolist()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
