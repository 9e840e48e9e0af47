"""Trains a small MLP under SPMD with one sharding layout and prints a JSON
report comparing it with the same training in eager PyTorch on the CPU.

Run by test_spmd.py in a subprocess (CPU_NUM_DEVICES must be set before JAX
starts): python spmd_mlp_worker.py dp|fsdp|2d|loader|fsdpv2|dp-compiled, or gpt-dp|gpt-fsdp|gpt-2d
for the small GPT decoder of tests/models/nets.py.
"""
import copy
import json
import sys

import numpy as np
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.engine import api

STEPS = 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)
        self.fc3 = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 16, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(n)]


def reference(model, data):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def gpt_main(layout):
    """The GPT decoder, 5 SGD steps under `layout`, against eager CPU."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
    from nets import GPT
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    torch.manual_seed(0)
    cpu_model = GPT(vocab=64, d=32, heads=4, layers=2, ctx=16)
    model = copy.deepcopy(cpu_model).to(torch_xla.device())
    g = torch.Generator().manual_seed(2)
    data = []
    for _ in range(STEPS):
        idx = torch.randint(0, 64, (8, 16), generator=g)
        data.append((idx, torch.roll(idx, -1, 1)))
    ref_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    ref_losses = []
    for x, y in data:
        ref_opt.zero_grad()
        loss = cpu_model(x, y)
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    if layout == "gpt-2d":
        mesh = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
        for b in model.blocks:
            xs.mark_sharding(b.qkv.weight, mesh, ("model", None))
            xs.mark_sharding(b.mlp[0].weight, mesh, ("model", None))
            xs.mark_sharding(b.proj.weight, mesh, (None, "model"))
            xs.mark_sharding(b.mlp[2].weight, mesh, (None, "model"))
    else:
        mesh = xs.Mesh(np.arange(n), (n,), ("data",))
        if layout == "gpt-fsdp":
            for p in model.parameters():
                if p.dim() == 2:
                    xs.mark_sharding(p, mesh, ("data", None))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    met.clear_all()
    losses = []
    for x, y in data:
        x, y = x.to(torch_xla.device()), y.to(torch_xla.device())
        xs.mark_sharding(x, mesh, ("data", None))
        xs.mark_sharding(y, mesh, ("data", None))
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        xm.mark_step()
        losses.append(loss)
    losses = [float(v.item()) for v in losses]
    compiles = met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0
    w = model.blocks[0].qkv.weight
    shard = api.device_array(w).addressable_shards[0].data
    print("REPORT " + json.dumps({
        "n": n, "losses": losses, "ref_losses": ref_losses, "compiles": compiles,
        "max_param_diff": max(float((p.cpu() - q).abs().max())
                              for p, q in zip(model.parameters(), cpu_model.parameters())),
        "qkv_spec": torch_xla._XLAC._get_xla_sharding_spec(w), "qkv_shard_fraction": shard.size / w.numel()}))


def main(layout):
    if layout.startswith("gpt-"):
        return gpt_main(layout)
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    torch.manual_seed(0)
    cpu_model = MLP()
    model = copy.deepcopy(cpu_model).to(torch_xla.device())
    wrapped = model
    data = batches(STEPS)
    ref_losses = reference(cpu_model, data)

    marks = {}
    if layout in ("dp", "loader", "dp-compiled"):
        mesh = xs.Mesh(np.arange(n), (n,), ("data",))
        in_spec = ("data", None)
    elif layout == "fsdp":
        mesh = xs.Mesh(np.arange(n), (n,), ("data",))
        in_spec = ("data", None)
        marks = {"fc1.weight": ("data", None), "fc1.bias": ("data",), "fc2.weight": ("data", None),
                 "fc2.bias": ("data",), "fc3.weight": (None, "data")}
    elif layout == "2d":
        mesh = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
        in_spec = ("data", None)
        marks = {"fc1.weight": ("model", None), "fc1.bias": ("model",), "fc2.weight": (None, "model")}
    elif layout == "fsdpv2":
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel
        mesh = xs.Mesh(np.arange(n), (n,), ("fsdp",))
        in_spec = ("fsdp", None)
        wrapped = SpmdFullyShardedDataParallel(model, mesh=mesh)
    else:
        raise SystemExit(f"unknown layout {layout}")
    params = dict(model.named_parameters())
    if layout == "fsdpv2":
        # every parameter sharded over 'fsdp' along its largest dimension (if divisible)
        marks = {name: None for name, p in params.items() if torch_xla._XLAC._get_xla_sharding_spec(p)}
    for name, spec in marks.items():
        if spec is not None:
            xs.mark_sharding(params[name], mesh, spec)
    specs_before = {name: torch_xla._XLAC._get_xla_sharding_spec(params[name]) for name in marks}

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if layout == "loader":
        loader = pl.MpDeviceLoader(data, torch_xla.device(), input_sharding=xs.ShardingSpec(mesh, in_spec))
    else:
        loader = None
    met.clear_all()
    losses = []
    input_specs = []
    output_specs = []

    def step(x, y):
        opt.zero_grad()
        out = wrapped(x)
        if layout == "fsdpv2":
            output_specs.append(torch_xla._XLAC._get_xla_sharding_spec(out))
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss

    if layout == "dp-compiled":
        step = torch_xla.compile(step, replay=True)
    if loader is not None:
        for x, y in loader:
            input_specs.append(torch_xla._XLAC._get_xla_sharding_spec(x))
            losses.append(step(x, y))
            xm.mark_step()
    else:
        for x, y in data:
            x, y = x.to(torch_xla.device()), y.to(torch_xla.device())
            xs.mark_sharding(x, mesh, in_spec)
            input_specs.append(torch_xla._XLAC._get_xla_sharding_spec(x))
            losses.append(step(x, y))
            xm.mark_step()
    losses = [float(v.item()) for v in losses]
    compiles = met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0

    per_device = {}
    for name in marks:
        arr = api.device_array(params[name])
        shard = arr.addressable_shards[0].data
        per_device[name] = [int(shard.size), int(np.prod(arr.shape)), len(arr.addressable_shards)]
    max_param_diff = max(float((p.cpu() - q).abs().max())
                         for p, q in zip(model.parameters(), cpu_model.parameters()))
    print("REPORT " + json.dumps({
        "n": n, "losses": losses, "ref_losses": ref_losses, "compiles": compiles,
        "max_param_diff": max_param_diff, "specs_before": specs_before,
        "specs_after": {name: torch_xla._XLAC._get_xla_sharding_spec(params[name]) for name in marks},
        "input_specs": input_specs, "per_device": per_device, "output_specs": output_specs,
        "replayed": met.counter_value("CompiledFnReplayed") or 0,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
