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

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mnist import MNIST, load_digits_28x28  # noqa: E402  (the model and data of the single-process example)


def digits_dataset():
    """The single-process example's data, split 80/20."""
    return load_digits_28x28(n_train=int(1797 * 0.8))


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
    if xm.is_master_ordinal(local=False):
        print(f"[xla:0] {xr.world_size()} replicas ready, {len(train_loader)} steps per epoch each; "
              "compiling the training step (the first step's log line follows)", flush=True)
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
        all_digests = [d.decode() for d in xm.rendezvous(f"params_epoch_{epoch}", digest.encode())]
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
