"""One SPMD program over every host's devices: each invocation is a "host"
(`xmp.spawn(fn, nprocs=1)` with XLA_NUM_HOSTS), its CPU_NUM_DEVICES devices join
one global mesh. `python spmd_multihost_worker.py OUT hosts` (run it once per host)
or `... OUT single` (one process over every device). Process 0 writes OUT."""
import json
import sys

import numpy as np
import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def fn(index, out):
    xr.use_spmd()
    import torch_xla.distributed.spmd as xs
    dev = torch_xla.device()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4)).to(dev)
    xs.mark_sharding(model[0].weight, mesh, ("data", None))   # FSDP-style: rows split over every device
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)   # every host feeds the same global batch
    losses = []
    for _ in range(5):
        x, y = torch.randn(16, 8, generator=g).to(dev), torch.randn(16, 4, generator=g).to(dev)
        xs.mark_sharding(x, mesh, ("data", None))
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
        losses.append(loss.item())
    shard_rows = [s.data.shape[0] for s in xs.wrap_if_sharded(model[0].weight).local_shards]
    rec = {"losses": losses, "params": [p.detach().cpu().tolist() for p in model.parameters()],
           "devices": n, "addressable": xr.addressable_runtime_device_count(), "hosts": xr.process_count(),
           "shard_rows": shard_rows, "spec": torch_xla._XLAC._get_xla_sharding_spec(model[0].weight),
           "world_size": xr.world_size()}
    if xr.process_index() == 0:
        with open(out, "w") as f:
            json.dump(rec, f)


if __name__ == "__main__":
    if sys.argv[2] == "hosts":
        xmp.spawn(fn, args=(sys.argv[1],), nprocs=1)
    else:
        fn(0, sys.argv[1])
