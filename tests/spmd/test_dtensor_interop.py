"""torch's DTensor API on XLA SPMD: distribute_tensor / distribute_module on an
"xla" DeviceMesh, XLAShardedTensor as a DTensor (placements, _spec,
redistribute), convert_to_xla_mesh. Values are checked against eager CPU.

The cases run in one subprocess with 4 host devices (CPU_NUM_DEVICES must be
fixed before JAX starts); this file is also that subprocess's script.
"""
import json
import os
import subprocess
import sys
import traceback

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
N = 4


# -- the cases (run in the worker) -------------------------------------------------

def _setup():
    import torch_xla.runtime as xr
    xr.use_spmd()
    assert xr.global_runtime_device_count() == N


def case_distribute_tensor_1d():
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh
    import torch_xla.distributed.spmd as xs
    mesh = init_device_mesh("xla", mesh_shape=(N,))
    cpu = torch.randn(8, 3)
    dt = distribute_tensor(cpu, mesh, [Shard(0)])
    assert isinstance(dt, xs.XLAShardedTensor) and isinstance(dt, DTensor)
    assert dt.global_tensor.device.type == "xla"
    assert dt.sharding_spec == "{devices=[4,1]0,1,2,3}", dt.sharding_spec
    assert dt.placements == (Shard(0),)
    assert dt.partition_spec == (0, None) and tuple(dt.mesh_shape) == (N,)
    assert dt._spec.tensor_meta.shape == cpu.shape and dt._spec.mesh.device_type == "xla"
    assert dt.device_mesh.mesh.tolist() == list(range(N))
    torch.testing.assert_close(dt.global_tensor.cpu(), cpu)
    shards = dt.local_shards
    for k, s in enumerate(shards):
        torch.testing.assert_close(s.data, cpu[2 * k:2 * k + 2])
    # Shard(-1) is the last dimension; default placements replicate
    dt2 = distribute_tensor(torch.randn(3, 8), mesh, [Shard(-1)])
    assert dt2.partition_spec == (None, 0) and dt2.sharding_spec == "{devices=[1,4]0,1,2,3}"
    dt3 = distribute_tensor(cpu, mesh)
    assert dt3.placements == (Replicate(),) and dt3.sharding_spec == "{replicated}"
    torch.testing.assert_close(dt3.global_tensor.cpu(), cpu)


def case_mesh_order_2d():
    import numpy as np
    import torch
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor
    import torch_xla.distributed.spmd as xs
    from torch_xla.distributed.spmd.api import convert_to_xla_mesh, convert_to_xla_partition_spec
    ids = [[3, 1], [2, 0]]
    mesh = DeviceMesh("xla", torch.tensor(ids), mesh_dim_names=("dp", "tp"))
    xm_ = convert_to_xla_mesh(mesh)
    assert isinstance(xm_, xs.Mesh) and xm_.mesh_shape == (2, 2) and xm_.axis_names == ("dp", "tp")
    assert list(xm_.device_ids) == [3, 1, 2, 0]
    cpu = torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6)
    assert convert_to_xla_partition_spec(cpu, [Shard(1), Replicate()]) == (None, 0)
    assert convert_to_xla_partition_spec(cpu, [Shard(0), Shard(0)]) == ((0, 1), None)
    # rows over dp, columns over tp: device ids[i][j] holds block (i, j)
    dt = distribute_tensor(cpu, mesh, [Shard(0), Shard(1)])
    assert dt.placements == (Shard(0), Shard(1))
    assert dt._spec.mesh.mesh.tolist() == ids and dt._spec.mesh.mesh_dim_names == ("dp", "tp")
    by_dev = {s.shard_device: s.data for s in dt.local_shards}
    for i in range(2):
        for j in range(2):
            want = cpu[2 * i:2 * i + 2, 3 * j:3 * j + 3]
            torch.testing.assert_close(by_dev[f"xla:{ids[i][j]}"], want)
    # one dimension over both mesh dimensions, in mesh order
    dt2 = distribute_tensor(cpu, mesh, [Shard(0), Shard(0)])
    assert dt2.partition_spec == ((0, 1), None) and dt2.placements == (Shard(0), Shard(0))
    flat = np.array(ids).flatten().tolist()
    by_dev = {s.shard_device: s.data for s in dt2.local_shards}
    for k, dev in enumerate(flat):
        torch.testing.assert_close(by_dev[f"xla:{dev}"], cpu[k:k + 1])
    # Replicate over dp, Shard(1) over tp: device ids[i][j] holds column block j
    dt3 = distribute_tensor(cpu, mesh, [Replicate(), Shard(1)])
    assert dt3.partition_spec == (None, 1)
    by_dev = {s.shard_device: s.data for s in dt3.local_shards}
    for i in range(2):
        for j in range(2):
            torch.testing.assert_close(by_dev[f"xla:{ids[i][j]}"], cpu[:, 3 * j:3 * j + 3])
    torch.testing.assert_close(dt3.global_tensor.cpu(), cpu)


def case_permuted_mesh_compute():
    """A graph over tensors laid out on a mesh whose device order is not 0..N-1,
    mixed with a scalar that is not sharded: the program takes the mesh's order."""
    import torch
    from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor
    mesh = DeviceMesh("xla", torch.tensor([[3, 1], [2, 0]]))
    cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    dt = distribute_tensor(cpu, mesh, [Shard(0), Shard(1)])
    torch.testing.assert_close((dt.global_tensor * 2).cpu(), cpu * 2)


def case_tensor_parallel_matches_cpu():
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh
    torch.manual_seed(0)
    mesh = init_device_mesh("xla", mesh_shape=(N,))
    w1, w2, x = torch.randn(16, 32), torch.randn(8, 16), torch.randn(5, 32)
    ref = torch.relu(x @ w1.T) @ w2.T
    a = distribute_tensor(w1.clone().requires_grad_(), mesh, [Shard(0)])
    b = distribute_tensor(w2.clone(), mesh, [Shard(1)])
    xi = distribute_tensor(x, mesh, [Replicate()])
    out = torch.relu(xi @ a.T) @ b.T
    host = out.cpu()
    assert type(host).__name__ == "XLAShardedTensor"   # as upstream: .cpu() stays wrapped
    torch.testing.assert_close(host.global_tensor, ref, rtol=1e-4, atol=1e-4)
    # gradients through the sharded weights equal CPU's
    w1x = torch.randn(16, 32)
    wx = distribute_tensor(w1x.clone(), mesh, [Shard(0)])
    gx = wx.global_tensor.requires_grad_()
    (torch.relu(xi.global_tensor @ gx.T) @ b.global_tensor.T).sum().backward()
    wc = w1x.clone().requires_grad_()
    (torch.relu(x @ wc.T) @ w2.T).sum().backward()
    torch.testing.assert_close(gx.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-4)


def case_redistribute():
    import numpy as np
    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard, init_device_mesh
    import torch_xla
    import torch_xla.distributed.spmd as xs
    mesh = xs.Mesh(np.arange(N), (N,))
    cpu = torch.randn(8, 16)
    t = cpu.to("xla")
    st = xs.mark_sharding(t, mesh, (0, None))
    r = st.redistribute(mesh, [Shard(1)])
    assert r.partition_spec == (None, 0) and r.placements == (Shard(1),)
    assert r.sharding_spec == "{devices=[1,4]0,1,2,3}"
    assert st.placements == (Shard(1),)   # in place: the same global tensor, re-laid out
    torch.testing.assert_close(r.global_tensor.cpu(), cpu)
    for k, s in enumerate(r.local_shards):
        torch.testing.assert_close(s.data, cpu[:, 4 * k:4 * k + 4])
    r = r.redistribute(mesh, [Replicate()])
    assert r.sharding_spec == "{replicated}" and r.placements == (Replicate(),)
    torch.testing.assert_close(r.global_tensor.cpu(), cpu)
    # a pending value: the layout is a constraint in its graph
    y = xs.mark_sharding(t * 3, mesh, (0, None))
    y2 = y.redistribute(mesh, [Shard(1)])
    z = y2.global_tensor + 1
    torch_xla.sync()
    assert y2.sharding_spec == "{devices=[1,4]0,1,2,3}"
    torch.testing.assert_close(z.cpu(), cpu * 3 + 1)
    # async_op: a copy is re-laid out, the original keeps its layout
    mesh2 = xs.Mesh(np.arange(N), (2, 2))
    u = xs.mark_sharding(torch.randn(8, 16).to("xla"), mesh2, (0, None))
    before = u.sharding_spec
    a = u.redistribute(mesh2, [Replicate(), Shard(0)], async_op=True)
    assert a.partition_spec == (1, None) and a.global_tensor is not u.global_tensor
    torch_xla.sync()
    assert u.sharding_spec == before
    assert a.sharding_spec == "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}", a.sharding_spec
    torch.testing.assert_close(a.global_tensor.cpu(), u.global_tensor.cpu())
    # a DeviceMesh works too, and no mesh means the tensor's own
    dmesh = init_device_mesh("xla", mesh_shape=(N,))
    d = xs.mark_sharding(cpu.to("xla"), mesh, (0, None)).redistribute(dmesh, [Shard(1)])
    assert d.partition_spec == (None, 0)
    e = d.redistribute(placements=[Shard(0)])
    assert e.partition_spec == (0, None)
    f = e.redistribute(mesh, [Shard(0)], forward_dtype=torch.bfloat16)
    assert f.dtype == torch.bfloat16 and e.dtype == torch.float32
    torch.testing.assert_close(f.global_tensor.cpu(), cpu.to(torch.bfloat16))
    # errors
    for bad, exc in (([Shard(2)], IndexError), ([Shard(0), Shard(1)], ValueError),
                     ([Partial()], NotImplementedError)):
        try:
            st.redistribute(mesh, bad)
        except exc:
            pass
        else:
            raise AssertionError(f"{bad} did not raise {exc.__name__}")


def case_distribute_module_training_matches_cpu():
    import copy
    import torch
    from torch import nn
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor, init_device_mesh
    import torch_xla
    torch.manual_seed(1)
    cpu_model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model = copy.deepcopy(cpu_model).to("xla")
    mesh = init_device_mesh("xla", mesh_shape=(N,))
    seen = []

    def partition(name, mod, m):
        if isinstance(mod, nn.Linear):
            distribute_tensor(mod.weight, m, [Shard(0)])

    def input_fn(mod, inputs, m):
        seen.append("in")
        return tuple(distribute_tensor(x, m, [Shard(0)]).global_tensor for x in inputs)

    def output_fn(mod, outputs, m):
        seen.append("out")
        return outputs

    sharded = distribute_module(model, mesh, partition, input_fn, output_fn)
    assert sharded is model
    assert torch_xla._XLAC._get_xla_sharding_spec(model[0].weight) == "{devices=[4,1]0,1,2,3}"
    assert torch_xla._XLAC._get_xla_sharding_spec(model[2].weight) == "{devices=[4,1]0,1,2,3}"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    copt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    losses, ref = [], []
    for step in range(3):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        for mdl, o, inp, tgt, out in ((model, opt, x.to("xla"), y.to("xla"), losses),
                                      (cpu_model, copt, x, y, ref)):
            o.zero_grad()
            loss = nn.functional.cross_entropy(mdl(inp), tgt)
            loss.backward()
            o.step()
            if mdl is model:
                torch_xla.sync()
            out.append(float(loss))
    assert seen == ["in", "out"] * 3
    for a, b in zip(losses, ref):
        assert abs(a - b) < 1e-4, (losses, ref)
    torch.testing.assert_close(model[0].weight.cpu(), cpu_model[0].weight.detach(), rtol=1e-4, atol=1e-4)
    # the annotation holds through training
    assert torch_xla._XLAC._get_xla_sharding_spec(model[0].weight) == "{devices=[4,1]0,1,2,3}"


def case_errors_and_edges():
    import torch
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_module, distribute_tensor
    import torch_xla.distributed.spmd as xs
    from torch_xla.distributed.spmd.api import convert_to_xla_mesh

    def raises(fn, exc, text=None):
        try:
            fn()
        except exc as e:
            assert text is None or text in str(e), str(e)
        else:
            raise AssertionError(f"no {exc.__name__}")

    mesh = DeviceMesh("xla", list(range(N)))
    raises(lambda: convert_to_xla_mesh(DeviceMesh("xla", list(range(N - 1)))), AssertionError)
    raises(lambda: distribute_tensor(torch.randn(4, 4), mesh, [Shard(0), Shard(1)]), ValueError)
    raises(lambda: distribute_tensor(torch.randn(4, 4), mesh, [Shard(2)]), IndexError)
    sharded = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    raises(lambda: distribute_tensor(sharded, mesh, [Shard(1)]), ValueError, "already sharded")
    # a replicated XLAShardedTensor can be distributed again: its global tensor is annotated
    rep = distribute_tensor(torch.randn(4, 4), mesh, [Replicate()])
    again = distribute_tensor(rep, mesh, [Shard(1)])
    assert again.global_tensor is rep.global_tensor and again.partition_spec == (None, 0)
    raises(lambda: distribute_module(torch.nn.Linear(2, 2), mesh, xs.auto_policy), NotImplementedError,
           "auto-sharding")
    # results of ops have no known layout
    s = sharded + sharded
    assert isinstance(s, xs.XLAShardedTensor)
    raises(lambda: s._spec, ValueError)
    raises(lambda: s.placements, ValueError, "Placements not available")
    # uneven: 6 rows over 4 devices, padded shards, right values
    cpu = torch.randn(6, 3)
    u = distribute_tensor(cpu, mesh, [Shard(0)])
    torch.testing.assert_close(u.global_tensor.cpu(), cpu)
    torch.testing.assert_close((u.global_tensor.sum(0)).cpu(), cpu.sum(0), rtol=1e-5, atol=1e-5)
    # the spec cache follows wrap_as_sharded_tensor
    spec = sharded._spec
    assert sharded._spec is spec
    xs.wrap_as_sharded_tensor(sharded, mesh_shape=(2, 2), partition_spec=(0, 1))
    assert sharded._spec is not spec and sharded.placements == (Shard(0), Shard(1))


CASES = [n for n in dict(globals()) if n.startswith("case_")]


def _worker():
    _setup()
    results = {}
    for name in CASES:
        try:
            globals()[name]()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print("RESULTS " + json.dumps(results))


# -- pytest side -----------------------------------------------------------------

@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(N), "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", "")})
    for k in ("XLA_USE_SPMD", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    p = subprocess.run([sys.executable, "-W", "ignore", os.path.abspath(__file__)], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=600)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULTS ")]
    assert p.returncode == 0 and lines, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(lines[-1][len("RESULTS "):])


_XFAIL = {}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=_XFAIL[c]))
                                  if c in _XFAIL else c for c in CASES])
def test_dtensor(results, case):
    assert results[case] == "ok", results[case]


if __name__ == "__main__":
    _worker()
