"""Checks of the sharding API under SPMD, run by test_spmd_api.py in a
subprocess (the device count must be set before JAX starts). Each check
asserts against eager CPU values or upstream's sharding strings; the script
prints 'ALL OK' when every check passed."""
import sys

import numpy as np
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.engine import api

spec = torch_xla._XLAC._get_xla_sharding_spec


def ids(order):
    return ",".join(str(int(i)) for i in order)


def check_strings(n):
    # upstream test_xla_sharding.py's expectations for the same mesh/spec
    t = torch.randn(1, 128).to("xla")
    xs.mark_sharding(t, xs.Mesh(np.flip(np.arange(n)), (1, n)), (0, 1))
    assert spec(t) == "{devices=[1,%d]%s}" % (n, ids(reversed(range(n)))), spec(t)
    t = torch.randn(1, 1, 16, 16).to("xla")
    xs.mark_sharding(t, xs.Mesh(np.arange(n), (1, 1, 2, n // 2)), (0, 1, 2, 3))
    assert spec(t) == "{devices=[1,1,2,%d]%s}" % (n // 2, ids(range(n))), spec(t)
    t = torch.randn(16).to("xla")
    xs.mark_sharding(t, xs.Mesh(np.arange(n), (2, n // 2)), ((0, 1),))
    assert spec(t) == "{devices=[%d]%s}" % (n, ids(range(n))), spec(t)
    mesh = xs.Mesh(range(n), (1, 2, n // 2), ("r", "b", "m"))
    t = torch.randn(16, 16).to("xla")
    xs.mark_sharding(t, mesh, (("r", "b"), None))
    assert spec(t) == "{devices=[2,1,%d]%s last_tile_dim_replicate}" % (n // 2, ids(range(n))), spec(t)
    t = torch.randn(16, 16).to("xla")
    xs.mark_sharding(t, mesh, (None, ("b", "m")))
    assert spec(t) == "{devices=[1,%d]%s}" % (n, ids(range(n))), spec(t)
    t = torch.randn(16, 16).to("xla")
    xs.mark_sharding(t, mesh, (None, ("r", "m")))
    order = mesh.get_logical_mesh().transpose((0, 2, 1)).flatten()
    assert spec(t) == "{devices=[1,%d,2]%s last_tile_dim_replicate}" % (n // 2, ids(order)), spec(t)
    t = torch.randn(16, 16).to("xla")
    xs.mark_sharding(t, mesh, (None, ("m", "b")))
    order = mesh.get_logical_mesh().transpose((2, 1, 0)).flatten()
    assert spec(t) == "{devices=[1,%d]%s}" % (n, ids(order)), spec(t)
    t = torch.randn(2, 2).to("xla")
    xs.mark_sharding(t, xs.Mesh(range(n), (1, 2, n // 2, 1), ("a", "b", "c", "d")), (("a", "b"), ("c", "d")))
    assert spec(t) == "{devices=[2,%d]%s}" % (n // 2, ids(range(n))), spec(t)
    t = torch.randn(4, 4).to("xla")
    xs.mark_sharding(t, xs.get_1d_mesh("x"), (None, None))
    assert spec(t) == "{replicated}", spec(t)
    assert torch_xla._XLAC._get_xla_sharding_type(t) == int(xs.ShardingType.REPLICATED)
    u = torch.randn(4, 4).to("xla")
    assert spec(u) == "" and torch_xla._XLAC._get_xla_sharding_type(u) is None


def check_mesh(n):
    mesh = xs.Mesh(np.arange(n), (2, n // 2), ("x", "y"))
    assert list(mesh.shape().items()) == [("x", 2), ("y", n // 2)]
    assert mesh.size() == n and mesh.get_axis_name_idx("y") == 1 and mesh.get_axis_name_idx("z") is None
    assert mesh.get_logical_mesh().tolist() == np.arange(n).reshape(2, n // 2).tolist()
    hm = xs.HybridMesh(ici_mesh_shape=(1, n), axis_names=("a", "b"))
    assert hm.mesh_shape == (1, n)
    xs.set_global_mesh(mesh)
    assert xs.get_global_mesh() is mesh
    assert xs.get_1d_mesh("d").mesh_shape == (n,)
    for bad in [lambda: xs.Mesh(np.arange(n - 1), (n - 1,)), lambda: xs.Mesh(np.arange(n), (n,), ("a", "b")),
                lambda: xs.Mesh(np.zeros(n, dtype=int), (n,))]:
        try:
            bad()
        except ValueError:
            pass
        else:
            raise AssertionError("bad mesh accepted")


def check_bad_specs(n):
    mesh = xs.Mesh(np.arange(n), (n, 1), ("x", "y"))
    t = torch.randn(8, 4).to("xla")
    for partition_spec, words in [((0,), ["rank", "[8, 4]", "(0,)"]), (("z", None), ["z", "('z', None)"]),
                                  ((2, None), ["out of bound"]), ((0, 0), ["at most once"])]:
        try:
            xs.mark_sharding(t, mesh, partition_spec)
        except ValueError as e:
            msg = str(e)
            assert all(w in msg for w in words), msg
            assert "mesh" in msg or "mesh_shape" in msg or "partition_spec" in msg, msg
        else:
            raise AssertionError(f"{partition_spec} accepted")
    # a dimension that does not divide over its axis is sharded with padding, as upstream
    cpu = torch.arange(float(n + 1))
    u = xs.mark_sharding(cpu.to("xla"), xs.Mesh(np.arange(n), (n,)), (0,))
    assert spec(u.global_tensor) == "{devices=[%d]%s}" % (n, ids(range(n)))
    shards = u.local_shards
    assert [tuple(sh.data.shape) for sh in shards] == [(2,)] * n
    assert torch.equal(torch.cat([sh.unpadded_data for sh in shards]), cpu)
    assert torch.equal(shards[-1].data, torch.zeros(2))   # all padding
    torch.testing.assert_close(((u.global_tensor * 2) + 1).cpu(), cpu * 2 + 1)
    w = torch.ones(2, 2).to("xla")
    xs.mark_sharding(w, xs.Mesh(np.arange(n), (1, n)), (0, 1))
    w.add_(1)
    torch_xla.sync()
    assert spec(w) == "{devices=[1,%d]%s}" % (n, ids(range(n))) and torch.equal(w.cpu(), torch.full((2, 2), 2.))
    assert spec(t) == ""  # a failed annotation leaves the tensor as it was


def check_values_and_shards(n):
    mesh = xs.Mesh(np.arange(n), (n,), ("x",))
    cpu = torch.randn(4 * n, 6)
    t = cpu.to("xla")
    st = xs.mark_sharding(t, mesh, ("x", None))
    assert isinstance(st, xs.XLAShardedTensor) and st.global_tensor is t
    arr = api.device_array(t)
    assert len(arr.addressable_shards) == n
    assert all(s.data.shape == (4, 6) for s in arr.addressable_shards)  # 1/n per device
    shards = st.local_shards
    assert len(shards) == n
    for i, s in enumerate(shards):
        assert torch.equal(s.data, cpu[4 * i:4 * (i + 1)]), i
        assert s.indices[0] == slice(4 * i, 4 * (i + 1), 1)
    assert torch.equal(t.cpu(), cpu)
    assert torch.allclose((t @ t.T).cpu(), cpu @ cpu.T, atol=1e-5)
    assert st.sharding_spec == spec(t)
    # ops on the wrapper run on the global tensor
    assert torch.allclose((st + 1).global_tensor.cpu(), cpu + 1)
    # a pending value: a sharding constraint inside the graph
    y = torch.relu(t) * 3
    xs.mark_sharding(y, mesh, (None, None))
    assert spec(y) == "{replicated}"
    assert torch.allclose(y.cpu(), torch.relu(cpu) * 3)
    # clear_sharding: replicated again, values kept
    out = xs.clear_sharding(st)
    assert out is t and spec(t) == ""
    assert api.device_array(t).sharding.is_fully_replicated and torch.equal(t.cpu(), cpu)
    print(t)  # printing assembles the global value


def check_gradients(n):
    mesh = xs.Mesh(np.arange(n), (n,), ("x",))
    torch.manual_seed(0)
    w_cpu = torch.randn(8, 2 * n, requires_grad=True)
    x_cpu = torch.randn(4, 8)
    w = w_cpu.detach().to("xla").requires_grad_(True)
    x = x_cpu.to("xla")
    ws = xs.mark_sharding_with_gradients(w, mesh, (None, "x"))
    (x @ ws).square().sum().backward()
    (x_cpu @ w_cpu).square().sum().backward()
    assert spec(w) == ""  # not in place
    assert torch.allclose(w.grad.cpu(), w_cpu.grad, atol=1e-4)
    # Parameters keep their sharding through backward and an optimizer step
    lin = torch.nn.Linear(8, 2 * n).to("xla")
    xs.mark_sharding(lin.weight, mesh, ("x", None))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    lin(x).sum().backward()
    opt.step()
    xm.mark_step()
    arr = api.device_array(lin.weight)
    assert arr.addressable_shards[0].data.shape == (2, 8), arr.sharding


def check_no_recompile(n):
    mesh = xs.Mesh(np.arange(n), (n,), ("x",))
    w = torch.randn(4 * n, 4).to("xla")
    xs.mark_sharding(w, mesh, ("x", None))
    met.clear_all()
    for _ in range(4):
        w.mul_(0.5).add_(1.0)
        xm.mark_step()
    assert met.metric_data("CompileTime")[0] <= 2, met.metric_data("CompileTime")
    # the same shapes with another layout are another graph
    v = torch.randn(4 * n, 4).to("xla")
    xs.mark_sharding(v, mesh, (None, None))
    before = met.metric_data("CompileTime")[0]
    v.mul_(0.5).add_(1.0)
    xm.mark_step()
    assert met.metric_data("CompileTime")[0] == before + 1


def check_shards_and_copies(n):
    import copy
    from torch_xla._XLAC import _global_tensor_from_cpu_shards as from_shards
    mesh = xs.Mesh(np.arange(n), (n,))
    # upstream's Mesh errors are AssertionErrors (and ValueErrors here)
    for bad in (lambda: xs.Mesh(np.arange(n), (2, n)), lambda: xs.Mesh(np.zeros(n, int), (1, n)),
                lambda: xs.Mesh(np.arange(n), (1, n), ("a", "a"))):
        try:
            bad()
            raise AssertionError("no error")
        except AssertionError as e:
            assert isinstance(e, ValueError) and str(e) != "no error", e
    # shard indices are slices with step 1, as upstream prints them
    t = xs.mark_sharding(torch.arange(2. * n).to("xla"), mesh, (0,))
    assert [sh.indices for sh in t.local_shards] == [[slice(2 * i, 2 * i + 2, 1)] for i in range(n)]
    # clone and deepcopy keep the layout
    x = torch.randn(2, 4, 8, 16).to("xla")
    xs.mark_sharding(x, xs.Mesh(np.arange(n), (1, 1, 1, n)), (0, 1, 2, 3))
    assert spec(x.clone()) == spec(copy.deepcopy(x)) == spec(x) == "{devices=[1,1,1,%d]%s}" % (n, ids(range(n)))
    torch.testing.assert_close(x.clone().cpu(), x.cpu())
    # an XLAShardedTensor goes through nn modules and stays wrapped
    lin = torch.nn.Linear(8, 4)
    want = lin(torch.ones(2, 8))
    out = lin.to("xla")(xs.mark_sharding(torch.ones(2, 8).to("xla"), xs.Mesh(np.arange(n), (1, n)), (0, 1)))
    assert type(out).__name__ == "XLAShardedTensor"
    torch.testing.assert_close(out.global_tensor.cpu(), want.detach())
    # a global tensor from CPU shards, with trailing padding cut off, and its errors
    shards = [torch.arange(n) + i * n for i in range(n)]
    g = from_shards(shards, mesh.get_op_sharding((0,)))
    assert torch.equal(g.cpu(), torch.arange(n * n)) and spec(g) == "{devices=[%d]%s}" % (n, ids(range(n)))
    assert torch.equal(from_shards(shards, mesh.get_op_sharding((0,)), torch.Size((n * n - 1,))).cpu(),
                       torch.arange(n * n - 1))
    for args in ((shards[:-1], mesh.get_op_sharding((0,))),
                 (shards, mesh.get_op_sharding((0,)), torch.Size((n * n + 1,))),
                 (shards, mesh.get_op_sharding((0,)), torch.Size((n * n - n,)))):
        try:
            from_shards(*args)
            raise AssertionError("no error")
        except RuntimeError:
            pass
    rep = from_shards([torch.tensor([7])] * n, xs.Mesh(np.arange(n), (1, n)).get_op_sharding((None, None)))
    assert torch.equal(rep.cpu(), torch.tensor([7]))
    # load_local_shards_ writes new values shard by shard
    t = xs.mark_sharding(torch.arange(float(n)).to("xla"), mesh, (0,))
    shards = t.local_shards
    for sh in shards:
        sh.data *= -1
    t.load_local_shards_(shards)
    assert torch.equal(t.global_tensor.cpu(), -torch.arange(float(n)))
    assert spec(t.global_tensor) == "{devices=[%d]%s}" % (n, ids(range(n)))
    for bad in (shards[:-1],):
        try:
            t.load_local_shards_(bad)
            raise AssertionError("no error")
        except RuntimeError:
            pass


def check_visualize(n):
    import io
    import contextlib
    from torch_xla.distributed.spmd import debugging
    mesh = xs.Mesh(np.arange(n), (2, n // 2))
    t = torch.randn(8, 8).to("xla")
    xs.mark_sharding(t, mesh, (0, 1))
    assert debugging._cells(spec(t)) == (2, n // 2, {(i, j): i * (n // 2) + j for i in range(2) for j in range(n // 2)})
    u = torch.randn(8, 8).to("xla")
    xs.mark_sharding(u, mesh, (0, None))   # rows over 'axis 0', replicated over axis 1
    rows, cols, cells = debugging._cells(spec(u))
    assert (rows, cols) == (2, 1) and cells[0, 0] == list(range(n // 2)), cells
    assert debugging._cells("{replicated}") == (1, 1, {(0, 0): list(range(n))})
    assert debugging._cells("{devices=[%d]%s}" % (n, ids(range(n))))[:2] == (1, n)
    try:
        debugging._cells("{devices=[2]0}")
        raise AssertionError("no error")
    except ValueError as e:
        assert "lists 1 devices" in str(e)
    # with rich: a table whose cells name the devices; without: the same as plain text
    if debugging.RICH_ENABLED:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            table = debugging.visualize_tensor_sharding(xs.wrap_as_sharded_tensor(t))
        assert table.row_count == 2 and "Visualizing {devices=[2,%d]" % (n // 2) in out.getvalue()
    saved, debugging.RICH_ENABLED = debugging.RICH_ENABLED, False
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            text = debugging.visualize_sharding(spec(t))
    finally:
        debugging.RICH_ENABLED = saved
    assert text.count("CPU ") == n and text.splitlines()[1].count("|") == n // 2 + 1, text


def _raises(fn, *words):
    try:
        fn()
    except RuntimeError as e:
        assert all(w in str(e) for w in words), (words, str(e))
        return
    raise AssertionError(f"no RuntimeError with {words}")


def check_manual(n):
    """enable/disable_manual_sharding: a shard_map region where each device
    computes on its own rows (a per-shard softmax and cumsum differ from the
    global ones), matching eager applied chunk by chunk."""
    mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))
    xs.set_global_mesh(mesh)
    cpu = torch.randn(4 * n, 6)
    x = cpu.to("xla")
    m = xs.enable_manual_sharding(x, ("data", None))
    assert m.shape == (4, 6) and m.sharding_spec == "{manual}" and m.sharding_type == xs.ShardingType.MANUAL
    local = torch.softmax(m.global_tensor, dim=0).cumsum(0) * 2
    full = xs.disable_manual_sharding(local, ("data", None), x.shape)
    assert full.shape == x.shape and spec(full.global_tensor) == "{devices=[%d,1]%s}" % (n, ids(range(n)))
    want = torch.cat([torch.softmax(c, dim=0).cumsum(0) * 2 for c in cpu.chunk(n)])
    torch.testing.assert_close(full.global_tensor.cpu(), want)
    # the low-level pair, explicit mesh, 2-D tiles
    mesh2 = xs.Mesh(np.arange(n), (2, n // 2))
    y = torch.arange(8 * n, dtype=torch.float32).reshape(4, 2 * n).to("xla")
    xs.mark_sharding(y, mesh2, (0, 1))
    yy = torch_xla._XLAC._spmd_full_to_shard_shape(y)
    assert yy.shape == (2, 4) and spec(yy) == "{manual}"
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([yy])
    assert 'custom_call_target="SPMDFullToShardShape", sharding={manual}' in hlo, hlo
    back = torch_xla._XLAC._spmd_shard_to_full_shape(
        xs._mark_manual_sharding(yy * 10).global_tensor, mesh2.get_op_sharding((0, 1)), y.shape, y.dtype)
    torch.testing.assert_close(back.cpu(), y.cpu() * 10)
    # errors name what is wrong
    plain = torch.ones(8, 4).to("xla")
    _raises(lambda: torch_xla._XLAC._spmd_full_to_shard_shape(plain), "has no sharding")
    _raises(lambda: xs._mark_manual_sharding(plain), "device data")
    _raises(lambda: torch_xla._XLAC._spmd_shard_to_full_shape(plain + 1, mesh.get_op_sharding((0, None)),
                                                             (8, 4), torch.float32), "not manually sharded")
    _raises(lambda: (m.global_tensor + 1).cpu(), "disable_manual_sharding")


def check_input_sharding(n):
    """send_cpu_data_to_device and MpDeviceLoader lay batches out as they
    arrive: one ShardingSpec for every tensor of its rank, or one per key of a
    dict batch (a missing key: KeyError; a batch that is not a dict: ValueError)."""
    import torch_xla.distributed.parallel_loader as pl
    mesh = xs.get_1d_mesh("x")
    rows = xs.ShardingSpec(mesh, ("x", None))
    cpu = torch.arange(8 * n, dtype=torch.float32).reshape(2 * n, 4)
    x, label = xm.send_cpu_data_to_device([cpu, torch.arange(3)], torch_xla.device(), input_sharding=rows)
    # as upstream: a tensor the spec does not fit arrives replicated (one moved with .to() has no spec)
    assert spec(x) == "{devices=[%d,1]%s}" % (n, ids(range(n))) and spec(label) == "{replicated}"
    assert spec(torch.arange(3).to("xla")) == ""
    assert torch.equal(x.cpu(), cpu) and label.cpu().tolist() == [0, 1, 2]
    batch = {"x": torch.randn(2 * n, 4), "y": torch.randn(2 * n, 4, 2)}
    loader = pl.MpDeviceLoader([batch], torch_xla.device(),
                               input_sharding={"x": rows, "y": xs.ShardingSpec(mesh, (None, "x", None))})
    (got,) = list(loader)
    assert spec(got["x"]) == "{devices=[%d,1]%s}" % (n, ids(range(n)))
    assert spec(got["y"]) == "{devices=[1,%d,1]%s}" % (n, ids(range(n)))
    torch.testing.assert_close(got["y"].cpu(), batch["y"])
    # input_sharding=None (upstream's test_input_sharding_none): every tensor replicated, values whole
    (plain,) = list(pl.MpDeviceLoader([batch], torch_xla.device(), input_sharding=None))
    assert spec(plain["x"]) == spec(plain["y"]) == "{replicated}"
    assert torch.equal(plain["x"].cpu(), batch["x"]) and torch.equal(plain["y"].cpu(), batch["y"])
    # a step on the loaded batch gives eager PyTorch's numbers
    w = torch.randn(4, 3)
    torch.testing.assert_close((plain["x"] @ w.to("xla")).cpu(), batch["x"] @ w, rtol=1e-5, atol=1e-5)
    # minibatch=True: on one host the per-host batch is the global one, laid out as without it
    mb = xs.ShardingSpec(mesh, ("x", None), minibatch=True)
    assert mb.minibatch and "minibatch=True" in repr(mb)
    data = [(torch.randn(2 * n, 4), torch.arange(2 * n)) for _ in range(3)]
    got = list(pl.MpDeviceLoader(data, torch_xla.device(), input_sharding=mb))
    ref = list(pl.MpDeviceLoader(data, torch_xla.device(), input_sharding=rows))
    for (gx, gl), (rx, rl), (cx, cl) in zip(got, ref, data):
        assert spec(gx) == spec(rx) == "{devices=[%d,1]%s}" % (n, ids(range(n)))
        assert spec(gl) == spec(rl) == "{replicated}"
        assert torch.equal(gx.cpu(), cx) and torch.equal(gl.cpu(), cl)
        torch.testing.assert_close((gx @ w.to("xla")).sum(0).cpu(), (cx @ w).sum(0), rtol=1e-5, atol=1e-5)
    x, = xm.send_cpu_data_to_device([data[0][0]], torch_xla.device(), input_sharding=mb)
    assert spec(x) == "{devices=[%d,1]%s}" % (n, ids(range(n))) and torch.equal(x.cpu(), data[0][0])
    # a per-host batch that does not divide over this host's devices: upstream's RuntimeError
    odd = [(torch.zeros(n - 1, 4), torch.zeros(n - 1))]
    words = ("per-host batch size must be divisible by local runtime device count", "local_runtime_device_count = %d" % n)
    _raises(lambda: next(iter(pl.MpDeviceLoader(odd, torch_xla.device(), input_sharding=mb))), *words)
    _raises(lambda: xm.send_cpu_data_to_device(list(odd[0]), torch_xla.device(), input_sharding=mb), *words)
    # ...while without minibatch the uneven batch is sharded with padding, as upstream
    (ux, _), = list(pl.MpDeviceLoader(odd, torch_xla.device(), input_sharding=rows))
    assert spec(ux) == "{devices=[%d,1]%s}" % (n, ids(range(n)))
    for data, error in (([batch], KeyError), ([batch["x"]], ValueError)):
        try:
            list(pl.MpDeviceLoader(data, torch_xla.device(), input_sharding={"x": rows}))
            raise AssertionError(f"no {error.__name__}")
        except error as e:
            assert "input_sharding" in str(e), e


def main():
    xr.use_spmd()
    assert xr.is_spmd()
    n = xr.global_runtime_device_count()
    assert n == int(sys.argv[1]), n
    assert xr.addressable_runtime_device_count() == n and xr.addressable_device_count() == 1
    assert str(torch_xla.device()) == "xla:0"
    for check in (check_strings, check_mesh, check_bad_specs, check_values_and_shards, check_gradients,
                  check_no_recompile, check_shards_and_copies, check_visualize, check_input_sharding, check_manual):
        check(n)
        print("ok", check.__name__, flush=True)
    print("ALL OK")


if __name__ == "__main__":
    main()
