"""2-D SPMD: a small decoder sharded over data x model.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/train_spmd_2d_transformer.py

The mesh is (data, model) = (N/2, 2). The batch is split over 'data'; inside
each block the attention's qkv projection and the MLP's first layer are split
by output features over 'model', the attention output projection and the MLP's
second layer by input features (Megatron's layout), so each device holds half
of every block's weights and XLA's partitioner adds one reduction per layer
pair. Embeddings and norms stay replicated.
"""
import argparse
import os
import sys

import numpy as np
import torch

import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args()

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    model_axis = 2 if n % 2 == 0 else 1
    mesh = xs.Mesh(np.arange(n), (n // model_axis, model_axis), ("data", "model"))
    device = torch_xla.device()

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
    from nets import GPT
    torch.manual_seed(0)
    model = GPT(vocab=128, d=64, heads=4, layers=2, ctx=32).to(device)
    for block in model.blocks:
        xs.mark_sharding(block.qkv.weight, mesh, ("model", None))
        xs.mark_sharding(block.mlp[0].weight, mesh, ("model", None))
        xs.mark_sharding(block.proj.weight, mesh, (None, "model"))
        xs.mark_sharding(block.mlp[2].weight, mesh, (None, "model"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    g = torch.Generator().manual_seed(0)
    print(f"2-D SPMD over {n} devices, mesh {dict(mesh.shape())}")
    for step in range(args.steps):
        idx = (torch.randint(0, 128, (args.batch_size, 1), generator=g) + torch.arange(32)) % 128
        idx, targets = idx.to(device), torch.roll(idx, -1, 1).to(device)
        xs.mark_sharding(idx, mesh, ("data", None))
        xs.mark_sharding(targets, mesh, ("data", None))
        optimizer.zero_grad()
        loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    print(f"qkv weight sharding: {torch_xla._XLAC._get_xla_sharding_spec(model.blocks[0].qkv.weight)}")


if __name__ == "__main__":
    main()
