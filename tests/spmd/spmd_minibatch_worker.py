"""Minibatch input sharding over hosts: each "host" (one launcher invocation,
`xmp.spawn(fn, nprocs=1)` with XLA_NUM_HOSTS) loads only ITS rows of the global
batch through MpDeviceLoader with ShardingSpec(mesh, ("data", None),
minibatch=True); its CPU_NUM_DEVICES devices join one global mesh.
`python spmd_minibatch_worker.py OUT hosts` (once per host) or `... OUT single`
(one process over every device, fed the whole global batch). Process 0 writes OUT.
Then a 2x2 mesh with the batch axis across hosts, and within each host.

The model's first weight has 30 rows over 4 devices (uneven: held padded at rest)."""
import json
import sys

import numpy as np
import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
from torch_xla.engine import api

GLOBAL_BATCH, STEPS = 16, 4


def batches():
    """The global batches of the run (every host draws the same ones)."""
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, 8, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
            for _ in range(STEPS)]


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 30), nn.Tanh(), nn.Linear(30, 4))


def eager_losses():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = []
    for x, y in batches():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out, [p.detach().tolist() for p in model.parameters()]


def two_d_batches(xs, dev, me, hosts):
    """A 2x2 mesh: over ("data", "model") each host loads its half of the batch;
    over ("model", "data") the batch axis lies within each host, so the hosts are
    replicas along it and each loads the whole batch. -> for each, whether the
    loader's global tensor is the global batch, and its spec."""
    x = torch.arange(16 * 3, dtype=torch.float32).reshape(16, 3)
    out = []
    for axes, split in ((("data", "model"), True), (("model", "data"), False)):
        mesh = xs.Mesh(np.arange(4), (2, 2), axes)
        rows = 16 // hosts if split else 16
        mine = x[me * rows:(me + 1) * rows] if split else x
        spec = xs.ShardingSpec(mesh, ("data", None), minibatch=True)
        for b in pl.MpDeviceLoader([mine], dev, input_sharding=spec):
            out.append([tuple(b.shape) == (16, 3) and torch.equal(b.cpu(), x),
                        torch_xla._XLAC._get_xla_sharding_spec(b)])
    return out


def fn(index, out):
    xr.use_spmd()
    import torch_xla.distributed.spmd as xs
    dev = torch_xla.device()
    n = xr.global_runtime_device_count()
    hosts, me = xr.process_count(), xr.process_index()
    mesh = xs.Mesh(np.arange(n), (n,), ("data",))
    model = make_model().to(dev)
    xs.mark_sharding(model[0].weight, mesh, ("data", None))   # 30 rows over 4 devices: padded
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rows = GLOBAL_BATCH // hosts
    # this host's rows of every global batch: hosts hold consecutive row blocks in
    # mesh order (host 0 the first devices), as make_array_from_process_local_data lays them
    mine = [(x[me * rows:(me + 1) * rows], y[me * rows:(me + 1) * rows]) for x, y in batches()]
    loader = pl.MpDeviceLoader(mine, dev, input_sharding=xs.ShardingSpec(mesh, ("data", None), minibatch=True))
    losses, shapes, specs = [], [], []
    for x, y in loader:
        shapes.append([list(x.shape), list(y.shape)])
        specs.append(torch_xla._XLAC._get_xla_sharding_spec(x))
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
        losses.append(loss.item())
    arr = api.value_node(model[0].weight).data   # the device buffers behind the weight
    rec = {"losses": losses, "params": [p.detach().cpu().tolist() for p in model.parameters()],
           "shapes": shapes, "specs": specs, "devices": n, "hosts": hosts,
           "local_rows": [s.data.shape[0] for s in arr.addressable_shards],
           "global_shape": list(arr.shape), "two_d": two_d_batches(xs, dev, me, hosts)}
    if me == 0:
        rec["eager_losses"], rec["eager_params"] = eager_losses()
        with open(out, "w") as f:
            json.dump(rec, f)
    print("OK")


if __name__ == "__main__":
    if sys.argv[2] == "hosts":
        xmp.spawn(fn, args=(sys.argv[1],), nprocs=1)
    else:
        fn(0, sys.argv[1])
