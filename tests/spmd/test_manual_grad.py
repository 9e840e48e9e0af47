"""Manual regions are differentiable: gradients through enable_manual_sharding /
disable_manual_sharding equal the unsharded computation's, for a sharded input
(replicated over one mesh axis) and a replicated weight used by every device."""
CODE = """
import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n // 2, 2), ("data", "model"))
dev = torch_xla.device()
torch.manual_seed(0)
xc, wc = torch.randn(8, 6), torch.randn(6, 6)

# the unsharded computation on the CPU
xr_, wr = xc.clone().requires_grad_(), wc.clone().requires_grad_()
ref_loss = ((xr_.sin() @ wr) ** 2).sum()
ref_loss.backward()

x, w = xc.to(dev).requires_grad_(), wc.to(dev).requires_grad_()
for step in range(2):       # the second step reuses the compiled graphs
    x.grad = w.grad = None
    xm_ = xs.enable_manual_sharding(x, ("data", None), mesh=mesh).global_tensor  # rows over 'data'
    wm = xs.enable_manual_sharding(w, (None, None), mesh=mesh).global_tensor     # every device its copy
    assert list(xm_.shape) == [8 // (n // 2), 6] and xm_.requires_grad
    ym = xm_.sin() @ wm
    y = xs.disable_manual_sharding(ym, ("data", None), (8, 6), mesh=mesh).global_tensor
    loss = (y ** 2).sum()
    loss.backward()
    del xm_, wm, ym, y          # per-device values must not outlive the step
    torch_xla.sync()
    torch.testing.assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.cpu(), xr_.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.cpu(), wr.grad, rtol=1e-4, atol=1e-4)
print("OK")
"""


def test_gradients_through_a_manual_region_match_the_unsharded_computation(spmd_run):
    spmd_run(CODE)
