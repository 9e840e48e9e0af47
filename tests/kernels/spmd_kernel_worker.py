"""Flash attention and gmm under SPMD on the host devices, run by
test_kernels_spmd.py in a subprocess (the device count is fixed before JAX
starts). Each check compares with the same kernel on plain CPU tensors (the
reference computed on the host) and prints 'ALL OK' at the end."""
import numpy as np
import torch

import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.experimental.custom_kernel import flash_attention, gmm

xr.use_spmd()
n = xr.global_runtime_device_count()
assert n == 4, n
mesh = xs.Mesh(np.arange(n), (n, 1, 1, 1), ("data", "h", "s", "d"))
torch.manual_seed(0)
q, k, v = (torch.randn(4, 2, 16, 8) for _ in range(3))
want = flash_attention(q, k, v, causal=True, sm_scale=0.5)          # host reference

# the kernel per shard in a manual-sharding region, batch split over 4 devices
qx, kx, vx = (t.to("xla").requires_grad_() for t in (q, k, v))
out = flash_attention(qx, kx, vx, causal=True, sm_scale=0.5, partition_spec=("data", None, None, None),
                      mesh=mesh)
got = out.cpu()
assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
print("manual region forward ok")
spec = torch_xla._XLAC._get_xla_sharding_spec(out)
print("output sharding", spec)
assert spec.startswith("{devices=[4,1,1,1]"), spec

# gradients through the manual region match unsharded ones
out.sum().backward()
# the unsharded node on the device, for the gradient reference
q2, k2, v2 = (t.to("xla").requires_grad_() for t in (q, k, v))
flash_attention(q2, k2, v2, causal=True, sm_scale=0.5).sum().backward()
for a, b in ((qx, q2), (kx, k2), (vx, v2)):
    assert torch.allclose(a.grad.cpu(), b.grad.cpu(), atol=1e-5), (a.grad.cpu() - b.grad.cpu()).abs().max()
print("manual region grads ok")

# segment ids are split with the batch
qs = torch.tensor([[0] * 8 + [1] * 8] * 4, dtype=torch.int32)
want = flash_attention(q, k, v, False, qs, qs, 1.0)
out = flash_attention(q.to("xla"), k.to("xla"), v.to("xla"), False, qs.to("xla"), qs.to("xla"), 1.0,
                      partition_spec=("data", None, None, None), mesh=mesh)
assert torch.allclose(out.cpu(), want, atol=1e-5), (out.cpu() - want).abs().max()
print("segment ids ok")

# the sequence axis split: the partitioner splits the whole-sequence computation
mesh2 = xs.Mesh(np.arange(n), (1, 1, n, 1), ("data", "h", "s", "d"))
want = flash_attention(q, k, v, causal=True)
out = flash_attention(q.to("xla"), k.to("xla"), v.to("xla"), causal=True, partition_spec=(None, None, "s", None),
                      mesh=mesh2)
assert torch.allclose(out.cpu(), want, atol=1e-5), (out.cpu() - want).abs().max()
print("sequence-sharded ok")

# gmm on a batch-sharded lhs
lhs, rhs = torch.randn(16, 8), torch.randn(3, 8, 4)
gs = torch.tensor([5, 6, 5], dtype=torch.int32)
want = gmm(lhs, rhs, gs)
lx = lhs.to("xla")
xs.mark_sharding(lx, xs.Mesh(np.arange(n), (n, 1)), (0, None))
got = gmm(lx, rhs.to("xla"), gs.to("xla")).cpu()
assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
print("gmm sharded ok")
print("ALL OK")
