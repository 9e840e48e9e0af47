"""torch.ops.xla.dynamo_mark_sharding: the operator form of mark_sharding, kept in
the graphs torch.compile captures; a no-op on CPU tensors."""
CODE = """
import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (1, n), ("x", "y"))
args = (mesh.device_ids.tolist(), list(mesh.mesh_shape), str(mesh.axis_names), "(1, 0)")
dev = torch_xla.device()

# eager: annotates the tensor in place
w = torch.randn(4, 8).to(dev)
torch.ops.xla.dynamo_mark_sharding(w, *args)
print("SPEC", torch_xla._XLAC._get_xla_sharding_spec(w))

# inside a compiled function: an activation is constrained, values unchanged
def fn(t):
    t2 = t + 1
    torch.ops.xla.dynamo_mark_sharding(t2, *args)
    return t2 * 2

x = torch.randn(4, 8)
out = torch.compile(fn, backend="openxla")(x.to(dev))
torch.testing.assert_close(out.cpu(), (x + 1) * 2)

# a CPU tensor is returned unchanged
c = torch.ones(2)
assert torch.ops.xla.dynamo_mark_sharding(c, [0], [1], "('a',)", "(0,)") is c
print("OK")
"""


def test_dynamo_mark_sharding_eager_compiled_and_cpu(spmd_run):
    assert "SPEC {devices=[4,1]0,1,2,3}" in spmd_run(CODE)
