"""Upstream's DDP example on XLA: DistributedDataParallel(gradient_as_bucket_view=True).

Run by test_distributed.py through torch_xla.launch (or torchrun with --torchrun).
Writes one JSON line per rank to the file given as argv[1]."""
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401
import torch_xla.runtime as xr


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def _mp_fn(index, out_path):
    dist.init_process_group("xla", init_method="xla://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch_xla.device()
    torch.manual_seed(rank)  # different init per rank: DDP must broadcast rank 0's
    model = ToyModel().to(device)
    ddp_model = DDP(model, gradient_as_bucket_view=True)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10, generator=g).to(device))
        labels = torch.randn(20, 5, generator=g).to(device)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        losses.append(loss.item())
    # torch.distributed collectives on XLA tensors
    t = torch.full((3,), float(rank + 1), device=device)
    dist.all_reduce(t)
    outs = [torch.zeros(2, device=device) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank), device=device))
    b = torch.full((2,), float(rank + 5), device=device)
    dist.broadcast(b, src=1)
    rs = torch.zeros(2, device=device)
    dist.reduce_scatter(rs, [torch.full((2,), float(rank * 10 + j), device=device) for j in range(world)])
    a2a_out = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_to_all(a2a_out, [torch.full((1,), float(rank * 10 + j), device=device) for j in range(world)])
    dist.barrier()
    xm.mark_step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    rec = {"rank": rank, "world": world, "losses": losses, "params": flat.tolist(),
           "all_reduce": t.cpu().tolist(), "all_gather": [o.cpu().tolist() for o in outs],
           "broadcast": b.cpu().tolist(), "reduce_scatter": rs.cpu().tolist(),
           "all_to_all": [o.cpu().tolist() for o in a2a_out], "xr_world": xr.world_size()}
    lines = xm.rendezvous("ddp_result", json.dumps(rec).encode())
    if rank == 0:
        with open(out_path, "w") as f:
            for line in lines:
                f.write(line.decode() + "\n")


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
