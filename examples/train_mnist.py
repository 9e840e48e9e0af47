"""Train upstream's MNIST CNN on the XLA device (CPU by default).

The data is real handwriting that ships with scikit-learn (the UCI digits,
8x8, upsampled to MNIST's 28x28), so nothing is downloaded. The loop is the
one torch_xla users write: model.to(device), forward, backward,
optimizer.step(), xm.mark_step(), with loss read back only at log steps.
"""
import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.test.test_utils as test_utils


class MNIST(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = self.bn1(x)
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = self.bn2(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def load_digits_28x28(n_train=1500):
    """(train, test) TensorDatasets of 1x28x28 digit images, normalised like MNIST;
    the first n_train of a fixed shuffle train, the rest test."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    x = (x - 0.1307) / 0.3081
    y = torch.tensor(digits.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    return (torch.utils.data.TensorDataset(x[:n_train], y[:n_train]),
            torch.utils.data.TensorDataset(x[n_train:], y[n_train:]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--log-steps", type=int, default=8)
    args = p.parse_args(argv)

    torch.manual_seed(1)
    train_set, test_set = load_digits_28x28()
    # drop_last keeps every step the same shape: one graph, compiled once
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.batch_size, drop_last=True)

    device = torch_xla.device()
    model = MNIST().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.NLLLoss()
    print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}, device {device} "
          f"({xm.xla_device_hw(device)}), {len(train_set)} train / {len(test_set)} test images")

    t_start = time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        tracker = xm.RateTracker()
        for step, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)
            loss.backward()
            optimizer.step()
            xm.mark_step()
            tracker.add(args.batch_size)
            if step % args.log_steps == 0:
                xm.add_step_closure(test_utils.print_training_update,
                                    args=(device, step, loss, tracker.rate(), tracker.global_rate(), epoch))
        model.eval()
        # the count stays on the device and each eval batch is one step: one eval
        # graph, nothing left pending to merge into the next training step
        correct = torch.zeros((), dtype=torch.int64).to(device)  # data, not a pending zeros op
        total = 0
        with torch.no_grad():
            for data, target in test_loader:
                data, target = data.to(device), target.to(device)
                pred = model(data).argmax(dim=1)
                correct += (pred == target).sum()
                total += data.shape[0]
                xm.mark_step()
        accuracy = 100.0 * correct.item() / total
        test_utils.print_test_update(device, accuracy, epoch=epoch)
    xm.wait_device_ops()
    print(f"Trained {args.epochs} epochs in {time.time() - t_start:.1f}s; final accuracy {accuracy:.2f}%; "
          f"{met.counter_value('UncachedCompile')} graphs built (training step: 2, the first creates "
          f"the optimizer state; eval step: 1){_from_disk()}, {met.counter_value('CachedCompile')} cached executions")
    print(met.short_metrics_report())
    return accuracy


def _from_disk():
    hits = met.counter_value("PersistentCacheHit")
    return f", {hits} of them loaded from the persistent cache (XLA_PERSISTENT_CACHE_PATH) instead of compiled" if hits else ""


if __name__ == "__main__":
    acc = main()
    sys.exit(0 if acc > 50 else 1)
