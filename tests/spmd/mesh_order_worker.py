"""Trains a small MLP with 2-D sharded weights on 4 CPU devices over a mesh in the
given device order, beside the same model on the CPU; prints OK and the weight's
sharding spec. Usage: mesh_order_worker.py ORDER [mixed]"""
import copy
import sys

import numpy as np
import torch

import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

order = sys.argv[1]
mixed = "mixed" in sys.argv[2:]     # the batch sharded over a second mesh, in id order
xr.use_spmd()
n = xr.global_runtime_device_count()
if order == "hybrid":
    # two "slices" of two devices: devices [[0, 2], [1, 3]]
    mesh = xs.HybridMesh((2, 1), (1, 2), ("data", "model"))
else:
    ids = {"reversed": np.arange(n)[::-1].copy(), "shuffled": np.array([2, 0, 3, 1]),
           "plain": np.arange(n)}[order]
    mesh = xs.Mesh(ids, (n // 2, 2), ("data", "model"))
batch_mesh = xs.Mesh(np.arange(n), (n // 2, 2), ("data", "model")) if mixed else mesh

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
ref = copy.deepcopy(model)
dev = torch_xla.device()
model = model.to(dev)
xs.mark_sharding(model[0].weight, mesh, ("model", "data"))
xs.mark_sharding(model[2].weight, mesh, (None, "model"))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for step in range(4):
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    xd = x.to(dev)
    xs.mark_sharding(xd, batch_mesh, ("data", None))
    opt.zero_grad()
    loss = (model(xd) - y.to(dev)).pow(2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()
    ropt.zero_grad()
    rl = (ref(x) - y).pow(2).mean()
    rl.backward()
    ropt.step()
    assert abs(loss.item() - rl.item()) < 1e-5, (step, loss.item(), rl.item())
for p, q in zip(model.parameters(), ref.parameters()):
    torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-5, atol=1e-5)
print("MESH", mesh.device_ids.tolist())
print("SPEC", torch_xla._XLAC._get_xla_sharding_spec(model[0].weight))
print("OK")
