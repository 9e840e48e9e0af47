"""The SPMD virtual device: in SPMD mode a tensor moved to `xla` keeps its value on
the host until mark_sharding (each device then receives only its shard) or a graph
needs it (then it is uploaded). A model built on the CPU, moved to the device and
sharded never lands whole on one device."""

MODEL_SHARDED_FROM_THE_HOST = """
import jax
import numpy as np
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n,), ("model",))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 12))
x = torch.randn(4, 16)
expected = model(x)
weights = {name: p.detach().clone() for name, p in model.named_parameters()}

met.clear_all()
model.to(torch_xla.device())
# moved, but nothing went to any device yet: the values wait on the host
assert met.metric_data("TransferToDeviceTime") is None
assert not [a for a in jax.live_arrays() if a.shape == (32, 16)]
assert "Tensor on host: with size [32, 16]" in torch_xla._XLAC._get_xla_tensor_debug_info(model[0].weight)
# reading a value back copies it from the host
torch.testing.assert_close(model[0].weight.cpu(), weights["0.weight"])
assert met.metric_data("TransferToDeviceTime") is None

# every parameter sharded over its first dim: shards go straight from the host
for p in model.parameters():
    xs.mark_sharding(p, mesh, ("model",) + (None,) * (p.dim() - 1))
assert met.counter_value("VirtualDeviceUsage") == 4
total = sum(w.numel() * w.element_size() for w in weights.values())
assert met.metric_data("OutboundData")[1] == total   # each byte sent once
live = jax.live_arrays()
for p in model.parameters():
    # the only buffers of a parameter's shape are laid out over every device,
    # each device holding a quarter
    same = [a for a in live if a.shape == tuple(p.shape)]
    assert same and all(len(a.sharding.device_set) == n for a in same)
    assert all(a.sharding.shard_shape(a.shape)[0] == p.shape[0] // n for a in same)

out = model(x.to(torch_xla.device()))
torch.testing.assert_close(out.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
for name, p in model.named_parameters():
    torch.testing.assert_close(p.cpu(), weights[name])
print("OK")
"""


def test_a_model_moved_to_the_device_and_sharded_never_lands_whole_on_one_device(spmd_run):
    spmd_run(MODEL_SHARDED_FROM_THE_HOST)


UNSHARDED = """
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr

xr.use_spmd()
info = torch_xla._XLAC._get_xla_tensor_debug_info
met.clear_all()
a = torch.arange(6.).reshape(2, 3)
t = a.to('xla')
a.add_(100)                      # the device tensor took a copy
assert "Device: SPMD:0" in info(t) and "Tensor on host: with size [2, 3]" in info(t)
torch.testing.assert_close(t.cpu(), torch.arange(6.).reshape(2, 3))   # read on the host
assert met.metric_data("TransferToDeviceTime") is None
assert t.sum().item() == 15.0
assert met.metric_data("TransferToDeviceTime")[0] == 1   # t.sum() needed it on the device

idx = torch.nonzero(t > 2)       # computed on the host: its result stays there too
assert "Tensor on host: with size [3, 2]" in info(idx) and idx.tolist() == [[1, 0], [1, 1], [1, 2]]

u = torch.ones(3).to('xla')
assert "Tensor on host: with size [3]" in info(u)
v = u * 2                        # its first use in a graph uploads it
assert "Tensor on host: None" in info(u) and "xla::device_data" in info(u)
assert v.tolist() == [2.0, 2.0, 2.0]

w = torch.full((4,), 7.0).to('xla')
torch_xla.sync()                 # a barrier uploads what is still on the host, as upstream's
assert "Tensor on host: None" in info(w) and "OpSharding: {replicated}" in info(w)
assert w.tolist() == [7.0] * 4
assert met.counter_value("ExecuteReplicated") >= 1
print("OK")
"""


def test_an_unsharded_tensor_waits_on_the_host_until_a_graph_needs_it(spmd_run):
    spmd_run(UNSHARDED)


FALLBACK_ON_SHARDED = """
import numpy as np
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
info = torch_xla._XLAC._get_xla_tensor_debug_info
n = xr.global_runtime_device_count()
x = torch.randn(16, 8)
xt = x.to('xla')
xs.mark_sharding(xt, xs.Mesh(np.arange(n), (n, 1)), (0, 1))
met.clear_all()
# torch.histc has no lowering: it runs on the CPU, so its result carries no sharding
# and stays on the host until the next barrier, which replicates it (upstream's
# test_fallback shows the same with torch.polar, which runs on the device here)
h = torch.histc(xt * 2, bins=5)
assert met.counter_value("aten::histc") == 1
assert "ShardingSpec: None" in info(h) and "Tensor on host: with size [5]" in info(h), info(h)
torch_xla.sync()
assert "Tensor on host: None" in info(h) and "OpSharding: {replicated}" in info(h), info(h)
torch.testing.assert_close(h.cpu(), torch.histc(x * 2, bins=5))
print("OK")
"""


def test_a_cpu_fallback_on_a_sharded_tensor_leaves_an_unsharded_result_on_the_host(spmd_run):
    spmd_run(FALLBACK_ON_SHARDED)


RUNTIME_COUNTS = """
import os
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

xr.use_spmd()
# one logical device (upstream's SPMD:0) over the four runtime devices
assert xr.global_device_count() == 1 and xr.global_runtime_device_count() == 4
assert xr.addressable_device_count() == 1 and xr.addressable_runtime_device_count() == 4
assert torch_xla.device() == xm.xla_device() == torch.device("xla:0") and str(torch_xla.device()) == "xla:0"
assert xr.is_spmd()
del os.environ["XLA_USE_SPMD"]   # is_spmd() reads the variable, as upstream's; the mode stays
assert not xr.is_spmd()
t = torch.ones(2, 2).to('xla')
assert "Device: SPMD:0" in torch_xla._XLAC._get_xla_tensor_debug_info(t)
xr.use_spmd()
assert xr.is_spmd() and (t + 1).sum().item() == 8.0
print("OK")
"""


def test_the_runtime_counts_one_virtual_device(spmd_run):
    spmd_run(RUNTIME_COUNTS)
