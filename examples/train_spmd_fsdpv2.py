"""FSDPv2: a small decoder trained with SpmdFullyShardedDataParallel.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/train_spmd_fsdpv2.py

One process drives every device (`xr.use_spmd()`). Every parameter is sharded
over the mesh axis 'fsdp' (each device keeps 1/N), the batch too; XLA's SPMD
partitioner gathers the weights where a layer needs them and reduce-scatters
the gradients. Each decoder block is its own FSDPv2 unit (auto_wrap_policy).
"""
import argparse
import functools
import os
import sys

import numpy as np
import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args()

    xr.use_spmd()
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "tensor"))
    xs.set_global_mesh(mesh)
    device = torch_xla.device()

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
    from nets import GPT, Block
    torch.manual_seed(0)
    model = GPT(vocab=128, d=64, heads=4, layers=2, ctx=32).to(device)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FSDPv2(model, auto_wrap_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    g = torch.Generator().manual_seed(0)
    print(f"FSDPv2 over {n} devices, mesh {dict(mesh.shape())}")
    for step in range(args.steps):
        # a learnable task: each row counts upwards from a random start
        idx = (torch.randint(0, 128, (args.batch_size, 1), generator=g) + torch.arange(32)) % 128
        idx, targets = idx.to(device), torch.roll(idx, -1, 1).to(device)
        xs.mark_sharding(idx, mesh, ("fsdp", None))
        xs.mark_sharding(targets, mesh, ("fsdp", None))
        optimizer.zero_grad()
        loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    w = model.module.head.weight if hasattr(model.module, "head") else next(model.parameters())
    print(f"a weight's sharding: {torch_xla._XLAC._get_xla_sharding_spec(w)}")


if __name__ == "__main__":
    main()
