"""LoweringContext over sharded tensors: the module carries the shardings with
explicit device lists (as upstream's builder writes them), sharded parameters are
handed back without a transfer, and XLA_SAVE_TENSORS_FILE lists each output's layout."""

CODE = r"""
import os, re
import numpy as np
import torch, torch_xla
import torch_xla.runtime as xr
import torch_xla.core.xla_builder as xb
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
xr.use_spmd()
mesh = xs.Mesh(np.arange(4), (2, 2), ("x", "y"))
dev = torch_xla.device()
spec = torch_xla._XLAC._get_xla_sharding_spec

# pending values annotated: custom-call Sharding in the module
a = torch.zeros(16, device=dev)
xs.mark_sharding(a, mesh, ("x",))
b = torch.ones(8, 16, device=dev)
xs.mark_sharding(b, mesh, (None, "y"))
outs = [a + 1, b * 2]
ctx = torch_xla._XLAC.lowering.LoweringContext("Sharded")
ctx.build(outs)
assert 'opcode: "custom-call"' in ctx.hlo_text() and "tile_assignment_devices: 2" in ctx.hlo_text()
hlo = xb.get_computation_hlo(xb.computation_from_module_proto("c", ctx.hlo()))
assert spec(b) == "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", spec(b)
for t in (a, b):
    assert re.search(r"%custom-call.*sharding=" + re.escape(spec(t)), hlo), (spec(t), hlo)
torch_xla.sync()
assert spec(outs[0]) == spec(a) and spec(outs[1]) == spec(b)
torch.testing.assert_close(outs[1].cpu(), torch.full((8, 16), 2.0))
text = open(os.environ["XLA_SAVE_TENSORS_FILE"] + ".0").read()
assert text.count("END_GRAPH") == 1
block = re.search(r"#OUTPUT_SHARDING_BEGIN\n\n(.*?)\n\n#OUTPUT_SHARDING_END", text, re.S).group(1)
assert block.split("\n") == [f"f32[16] {spec(a)}", f"f32[8,16] {spec(b)}",
                             f"f32[16] {spec(a)}", f"f32[8,16] {spec(b)}"], block

# device data annotated: sharded parameters, handed back with no transfer
c = torch.arange(32.0).reshape(4, 8).to(dev)
xs.mark_sharding(c, mesh, ("x", "y"))
d = torch.ones(8).to(dev)
xs.mark_sharding(d, mesh, ("x",))
met.clear_all()
ctx = torch_xla._XLAC.lowering.LoweringContext("Params")
ctx.build([c + d])
mapping = ctx.device_parameter_id_tensor_mapping()
assert len(mapping) == 2 and {ctx.tensor_parameter_id(c), ctx.tensor_parameter_id(d)} == {0, 1}
assert not met.metric_data("TransferFromDeviceTime")
param_shardings = [line for line in ctx.hlo_text().split("\n") if "tile_assignment_dimensions" in line]
assert param_shardings, ctx.hlo_text()[:2000]
torch.testing.assert_close(mapping[ctx.tensor_parameter_id(c)].cpu(), torch.arange(32.0).reshape(4, 8))
print("OK")
"""


def test_lowering_context_over_sharded_tensors(spmd_run, tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_SAVE_TENSORS_FILE", str(tmp_path / "graphs.txt"))
    monkeypatch.setenv("XLA_SAVE_TENSORS_FMT", "hlo")
    spmd_run(CODE)
