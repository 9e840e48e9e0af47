"""Multi-process MNIST, as upstream's test_train_mp_mnist.py: one process per device.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/train_mnist_mp.py

Data: scikit-learn's 8x8 digits, upsampled to 28x28 (small, real, offline).
Each replica trains on its shard (DistributedSampler); xm.optimizer_step
all-reduces the gradients in the step graph. After every epoch the replicas
compare a hash of their parameters: they must be bit-identical.
"""
import argparse
import hashlib
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr


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


def digits_dataset():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    x = (x - 0.1307) / 0.3081
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    n_train = int(len(y) * 0.8)
    return (torch.utils.data.TensorDataset(x[:n_train], y[:n_train]),
            torch.utils.data.TensorDataset(x[n_train:], y[n_train:]))


def params_digest(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def _mp_fn(index, flags):
    torch.manual_seed(1)
    train_set, test_set = digits_dataset()
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=True, drop_last=True)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=flags.batch_size, sampler=train_sampler,
                                               drop_last=True)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=flags.batch_size, sampler=test_sampler)

    device = torch_xla.device()
    model = MNIST().to(device)
    lr = flags.lr * xr.world_size()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=flags.momentum)
    loss_fn = nn.NLLLoss()
    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    test_device_loader = pl.MpDeviceLoader(test_loader, device)

    def train_loop_fn(loader, epoch):
        tracker = xm.RateTracker()
        model.train()
        for step, (data, target) in enumerate(loader):
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            loss.backward()
            xm.optimizer_step(optimizer)
            tracker.add(flags.batch_size)
            if step % flags.log_steps == 0:
                xm.add_step_closure(_train_update, args=(device, step, loss, tracker, epoch))

    def test_loop_fn(loader):
        total_samples = 0
        correct = 0
        model.eval()
        for data, target in loader:
            output = model(data)
            pred = output.max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).sum()
            total_samples += data.size()[0]
        accuracy = 100.0 * correct.item() / total_samples
        return xm.mesh_reduce("test_accuracy", accuracy, lambda xs: sum(xs) / len(xs))

    digests = []
    accuracy = 0.0
    for epoch in range(1, flags.num_epochs + 1):
        train_sampler.set_epoch(epoch)
        train_loop_fn(train_device_loader, epoch)
        digest = params_digest(model)
        all_digests = [d.decode() for d in xm.rendezvous(f"params_epoch_{epoch}", digest)]
        same = len(set(all_digests)) == 1
        digests.append(same)
        accuracy = test_loop_fn(test_device_loader)
        if xm.is_master_ordinal(local=False):
            print(f"Epoch {epoch} test accuracy={accuracy:.2f}% params bit-identical across "
                  f"{len(all_digests)} replicas: {same} ({all_digests[0][:16]})", flush=True)
        if not same:
            raise RuntimeError(f"replicas diverged after epoch {epoch}: {all_digests}")
    if xm.is_master_ordinal(local=False) and flags.result_file:
        import json
        with open(flags.result_file, "w") as f:
            json.dump({"accuracy": accuracy, "identical": digests, "world_size": xr.world_size()}, f)
    return accuracy


def _train_update(device, step, loss, tracker, epoch):
    if xm.is_master_ordinal(local=False):
        print(f"[xla:{xr.global_ordinal()}] epoch {epoch} step {step} loss={loss.item():.5f} "
              f"rate={tracker.rate():.1f} global_rate={tracker.global_rate():.1f} "
              f"time={time.strftime('%H:%M:%S')}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--num_epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--log_steps", type=int, default=10)
    p.add_argument("--result_file", default=os.environ.get("MNIST_MP_RESULT", ""))
    flags = p.parse_args(argv)
    torch_xla.launch(_mp_fn, args=(flags,))


if __name__ == "__main__":
    sys.exit(main())
