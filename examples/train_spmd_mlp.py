"""Data-parallel SPMD training of an MLP: one process drives every device.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/train_spmd_mlp.py

`xr.use_spmd()` makes `xla:0` one logical device over all local devices
(CPU_NUM_DEVICES host devices on CPU). The batch is sharded over the mesh
axis 'data' by MpDeviceLoader's `input_sharding`; the parameters stay
replicated, and XLA's SPMD partitioner inserts the gradient all-reduce. The
step compiles at most twice (the first step creates the optimizer state).
With --fsdp the weights are sharded too (each device holds 1/N of them).
"""
import argparse

import numpy as np
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--fsdp", action="store_true", help="shard the weights' first dimension too")
    args = parser.parse_args()

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    device = torch_xla.device()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device)
    if args.fsdp:
        for layer in (model[0], model[2]):
            xs.mark_sharding(layer.weight, mesh, ("data", None))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    # a learnable toy task: the label is the argmax of a fixed projection
    g = torch.Generator().manual_seed(0)
    proj = torch.randn(64, 10, generator=g)
    batches = []
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 64, generator=g)
        batches.append((x, (x @ proj).argmax(1)))
    loader = pl.MpDeviceLoader(batches, device, input_sharding=xs.ShardingSpec(mesh, ("data", None)))

    def report(step, loss, x):
        print(f"step {step:3d}  loss {loss.item():.4f}  "
              f"batch sharding {torch_xla._XLAC._get_xla_sharding_spec(x)}", flush=True)

    print(f"SPMD over {n} devices, mesh {dict(mesh.shape())}")
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 5 == 0 or step == args.steps - 1:
            # runs after the loader's barrier: reading the loss then compiles nothing
            xm.add_step_closure(report, (step, loss, x))
    print(f"compilations: {met.metric_data('CompileTime')[0]}")
    print(f"first layer weight sharding: {torch_xla._XLAC._get_xla_sharding_spec(model[0].weight) or 'replicated'}")


if __name__ == "__main__":
    main()
