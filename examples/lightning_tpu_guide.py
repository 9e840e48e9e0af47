"""The Trainer configurations of Lightning's TPU guide (Lightning 2.x argument names), on
torch_xla's devices: each trains a small LightningModule for 2 epochs and prints its loss.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=8 python examples/lightning_tpu_guide.py          # every one
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=2 python examples/lightning_tpu_guide.py one index16

Configurations (the guide's lines):
  one      Trainer(accelerator="tpu", devices=1)
  index    Trainer(accelerator="tpu", devices=[1])            (one process, on xla:1)
  auto     Trainer(accelerator="tpu", devices="auto")          (one process per device)
  eight    Trainer(accelerator="tpu", devices=8)               (needs 8 devices)
  debug    Trainer(accelerator="tpu", devices=2, strategy="xla_debug")
  index16  Trainer(accelerator="tpu", devices=[1], precision="16-true")
  bf16     Trainer(accelerator="tpu", devices=1, precision="bf16-true")
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

CONFIGS = {
    "one": dict(devices=1),
    "index": dict(devices=[1]),
    "auto": dict(devices="auto"),
    "eight": dict(devices=8),
    "debug": dict(devices=2, strategy="xla_debug"),
    "index16": dict(devices=[1], precision="16-true"),
    "bf16": dict(devices=1, precision="bf16-true"),
}


def make_module():
    import pytorch_lightning as pl

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def training_step(self, batch, idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Regressor()


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return DataLoader(TensorDataset(x, y), batch_size=8)


def run(name):
    import pytorch_lightning as pl
    model = make_module()
    trainer = pl.Trainer(accelerator="tpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, **CONFIGS[name])
    trainer.fit(model, data())
    loss = float(trainer.callback_metrics["train_loss"])
    if trainer.is_global_zero:
        print(f"{name}: {type(trainer.strategy).__name__} on {trainer.num_devices} device(s), "
              f"precision {trainer.precision}, final loss {loss:.4f}", flush=True)
    return loss


if __name__ == "__main__":
    for name in sys.argv[1:] or list(CONFIGS):
        run(name)
