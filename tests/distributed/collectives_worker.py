"""One multi-process job that checks every collective against NumPy.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=<n> python collectives_worker.py <result.json>

Every replica knows every replica's inputs (they are made from the ordinal),
computes the expected values in NumPy and records mismatches; ordinal 0
writes {"checks": {name: "ok" | error text}} for all replicas to result.json.
"""
import json
import os
import sys
import tempfile
import traceback

import numpy as np
import torch

import torch_xla
import torch_xla.core.functions as xf
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def inp(rank, shape, dtype=np.float32, kind="normal", salt=0):
    rs = np.random.RandomState(1000 * salt + rank)
    if kind == "normal":
        return rs.standard_normal(shape).astype(dtype)
    if kind == "near1":
        return (1.0 + 0.1 * rs.standard_normal(shape)).astype(dtype)
    if kind == "int":
        return rs.randint(0, 1 << 12, size=shape).astype(dtype)
    raise ValueError(kind)


def group_of(rank, groups, n):
    if not groups:
        return list(range(n))
    for g in groups:
        if rank in g:
            return list(g)
    raise AssertionError


NP_REDUCE = {"sum": lambda a: np.sum(a, axis=0), "mul": lambda a: np.prod(a, axis=0),
             "min": lambda a: np.min(a, axis=0), "max": lambda a: np.max(a, axis=0),
             "and": lambda a: np.bitwise_and.reduce(a, axis=0), "or": lambda a: np.bitwise_or.reduce(a, axis=0)}


def _mp_fn(index, out_path):
    n, r = xr.world_size(), xr.global_ordinal()
    dev = torch_xla.device()
    checks = {}
    pending = []  # (name, xla tensor, expected numpy, exact)

    def expect(name, t, want, exact=False):
        pending.append((name, t, np.asarray(want), exact))

    def T(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

    pairs_groups = [None]
    if n == 4:
        pairs_groups += [[[0, 1], [2, 3]], [[0, 2], [1, 3]]]
    else:
        pairs_groups += [[[0], [1]]]

    # -- all_reduce: every type, scale, groups, single-tensor form ------------------------
    for rt, kind, dtype in (("sum", "normal", np.float32), ("mul", "near1", np.float32),
                            ("min", "normal", np.float32), ("max", "normal", np.float32),
                            ("and", "int", np.int32), ("or", "int", np.int32), ("sum", "int", np.int64)):
        for gi, groups in enumerate(pairs_groups):
            x = inp(r, (3, 4), dtype, kind, salt=1)
            members = group_of(r, groups, n)
            want = NP_REDUCE[rt](np.stack([inp(m, (3, 4), dtype, kind, salt=1) for m in members]))
            got = xm.all_reduce(rt, T(x), groups=groups)
            expect(f"all_reduce[{rt},{np.dtype(dtype).name},groups{gi}]", got, want, exact=dtype != np.float32)
    x = inp(r, (5,), salt=2)
    want = np.sum(np.stack([inp(m, (5,), salt=2) for m in range(n)]), 0) * 0.25
    expect("all_reduce[sum,scale=0.25]", xm.all_reduce(xm.REDUCE_SUM, T(x), scale=0.25), want)
    # list form: in place, returns the list
    a, b = T(inp(r, (2, 3), salt=3)), T(inp(r, (4,), np.int64, "int", salt=3))
    ret = xm.all_reduce(xm.REDUCE_SUM, [a, b], scale=1.0)
    checks["all_reduce[list returns inputs]"] = "ok" if ret[0] is a and ret[1] is b else "returned other objects"
    expect("all_reduce[list,inplace,f32]", a, np.sum(np.stack([inp(m, (2, 3), salt=3) for m in range(n)]), 0))
    expect("all_reduce[list,inplace,i64]", b,
           np.sum(np.stack([inp(m, (4,), np.int64, "int", salt=3) for m in range(n)]), 0), exact=True)
    # a view in the list (DDP buckets are views)
    base = T(inp(r, (6,), salt=4))
    view = base[2:5]
    xm.all_reduce(xm.REDUCE_MAX, [view])
    wantb = inp(r, (6,), salt=4).copy()
    wantb[2:5] = np.max(np.stack([inp(m, (6,), salt=4)[2:5] for m in range(n)]), 0)
    expect("all_reduce[view,inplace]", base, wantb)

    # -- all_gather: dims, groups, output= --------------------------------------------------
    for gi, groups in enumerate(pairs_groups):
        members = group_of(r, groups, n)
        for dim in (0, 1, -1):
            x = inp(r, (2, 3), salt=5)
            want = np.concatenate([inp(m, (2, 3), salt=5) for m in members], axis=dim)
            expect(f"all_gather[dim={dim},groups{gi}]", xm.all_gather(T(x), dim=dim, groups=groups), want)
    out = torch.zeros(2 * n, 3, device=dev)
    res = xm.all_gather(T(inp(r, (2, 3), salt=6)), dim=0, output=out)
    checks["all_gather[output= returns output]"] = "ok" if res is out else "returned another tensor"
    expect("all_gather[output=]", out, np.concatenate([inp(m, (2, 3), salt=6) for m in range(n)], 0))

    # -- reduce_scatter: dims, scale, groups, types, output= ---------------------------------
    for gi, groups in enumerate(pairs_groups):
        members = group_of(r, groups, n)
        g = len(members)
        pos = members.index(r)
        for dim, rt in ((0, "sum"), (1, "sum"), (0, "max")):
            shape = (2 * g, 3) if dim == 0 else (2, 3 * g)
            x = inp(r, shape, salt=7)
            full = NP_REDUCE[rt](np.stack([inp(m, shape, salt=7) for m in members])) * 0.5
            size = shape[dim] // g
            want = np.take(full, range(pos * size, (pos + 1) * size), axis=dim)
            got = xm.reduce_scatter(rt, T(x), 0.5, dim, g, groups=groups)
            expect(f"reduce_scatter[{rt},dim={dim},scale=0.5,groups{gi}]", got, want)
    out = torch.zeros(2, 3, device=dev)
    res = xm.reduce_scatter(xm.REDUCE_SUM, T(inp(r, (2 * n, 3), salt=8)), 1.0, 0, n, output=out)
    full = np.sum(np.stack([inp(m, (2 * n, 3), salt=8) for m in range(n)]), 0)
    checks["reduce_scatter[output= returns output]"] = "ok" if res is out else "returned another tensor"
    expect("reduce_scatter[output=]", out, full[2 * r:2 * r + 2])
    # list (coalesced) form
    lst = xm.reduce_scatter(xm.REDUCE_SUM, [T(inp(r, (n, 2), salt=9)), T(inp(r, (2 * n,), salt=10))], 1.0, 0, n)
    f1 = np.sum(np.stack([inp(m, (n, 2), salt=9) for m in range(n)]), 0)
    f2 = np.sum(np.stack([inp(m, (2 * n,), salt=10) for m in range(n)]), 0)
    expect("reduce_scatter[list,0]", lst[0], f1[r:r + 1])
    expect("reduce_scatter[list,1]", lst[1], f2[2 * r:2 * r + 2])

    # -- all_to_all -------------------------------------------------------------------------
    for gi, groups in enumerate(pairs_groups):
        members = group_of(r, groups, n)
        g = len(members)
        pos = members.index(r)
        for sd, cd in ((0, 0), (1, 0), (0, 1)):
            shape = [2, 3]
            shape[sd] *= g
            shape = tuple(shape)
            chunk = shape[sd] // g
            pieces = [np.take(inp(m, shape, salt=11), range(pos * chunk, (pos + 1) * chunk), axis=sd)
                      for m in members]
            want = np.concatenate(pieces, axis=cd)
            got = xm.all_to_all(T(inp(r, shape, salt=11)), sd, cd, g, groups=groups)
            expect(f"all_to_all[split={sd},concat={cd},groups{gi}]", got, want)

    # -- collective_permute -----------------------------------------------------------------
    ring = [(i, (i + 1) % n) for i in range(n)]
    x = inp(r, (3,), salt=12)
    expect("collective_permute[ring]", xm.collective_permute(T(x), ring), inp((r - 1) % n, (3,), salt=12))
    partial = [(0, n - 1)]
    want = inp(0, (3,), salt=12) if r == n - 1 else np.zeros(3, np.float32)
    expect("collective_permute[partial]", xm.collective_permute(T(x), partial), want)

    # -- collective_broadcast (in place) ----------------------------------------------------
    a, b = T(inp(r, (2, 2), salt=13)), T(inp(r, (3,), np.int64, "int", salt=13))
    xm.collective_broadcast([a, b], root_ordinal=1)
    expect("collective_broadcast[root=1,f32]", a, inp(1, (2, 2), salt=13))
    expect("collective_broadcast[root=1,i64]", b, inp(1, (3,), np.int64, "int", salt=13), exact=True)
    if n == 4:
        c = T(inp(r, (2,), salt=14))
        xm.collective_broadcast([c], root_ordinal=2, groups=[[0, 1], [2, 3]])
        want = inp(2, (2,), salt=14) if r in (2, 3) else np.zeros(2, np.float32)
        expect("collective_broadcast[groups]", c, want)

    # -- rank-dependent constants, several collectives in one graph ---------------------------
    c1 = xm.all_reduce(xm.REDUCE_SUM, torch.full((3,), float(r + 1), device=dev))
    c2 = xm.all_gather(torch.full((2,), float(r), device=dev) + r)
    expect("constants[all_reduce of full()]", c1, np.full(3, n * (n + 1) / 2))
    expect("constants[all_gather of full()+r]", c2, np.repeat(2.0 * np.arange(n), 2))

    xm.mark_step()
    for name, t, want, exact in pending:
        try:
            got = t.cpu().numpy()
            if got.shape != want.shape:
                raise AssertionError(f"shape {got.shape} != {want.shape}")
            if exact:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            checks[name] = "ok"
        except Exception as e:  # noqa: BLE001
            checks[name] = f"FAIL: {e}"[:400]

    # -- optimizer_step / reduce_gradients / broadcast_master_param --------------------------
    try:
        torch.manual_seed(r)  # different start on every replica
        model = torch.nn.Linear(4, 1, bias=False).to(dev)
        xm.broadcast_master_param(model)
        w0 = model.weight.detach().cpu().numpy()
        torch.manual_seed(0)
        w_rank0 = torch.nn.Linear(4, 1, bias=False).weight.detach().numpy()
        np.testing.assert_array_equal(w0, w_rank0)
        checks["broadcast_master_param"] = "ok"
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = inp(r, (1, 4), salt=15)
        model(T(x)).sum().backward()
        xm.optimizer_step(opt, barrier=True)
        mean_grad = np.mean(np.stack([inp(m, (1, 4), salt=15) for m in range(n)]), 0)
        np.testing.assert_allclose(model.weight.detach().cpu().numpy(), w0 - 0.1 * mean_grad, rtol=1e-5, atol=1e-6)
        checks["optimizer_step[grads averaged]"] = "ok"
        opt.zero_grad()
        model(T(x)).sum().backward()
        xm.reduce_gradients(opt)
        xm.mark_step()
        np.testing.assert_allclose(model.weight.grad.cpu().numpy(), mean_grad, rtol=1e-5, atol=1e-6)
        checks["reduce_gradients"] = "ok"
    except Exception:  # noqa: BLE001
        checks["optimizer_step"] = "FAIL: " + traceback.format_exc()[-400:]

    # -- functions.all_gather with autograd ----------------------------------------------------
    try:
        x = T(inp(r, (2, 3), salt=16)).requires_grad_(True)
        y = xf.all_gather(x, dim=0)
        cw = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3)
        (y * T(cw)).sum().backward()
        xm.mark_step()
        np.testing.assert_allclose(y.detach().cpu().numpy(),
                                   np.concatenate([inp(m, (2, 3), salt=16) for m in range(n)], 0), rtol=1e-6)
        np.testing.assert_array_equal(x.grad.cpu().numpy(), cw[2 * r:2 * r + 2])
        checks["functions.all_gather[autograd]"] = "ok"
    except Exception:  # noqa: BLE001
        checks["functions.all_gather"] = "FAIL: " + traceback.format_exc()[-400:]

    # -- functions.SyncBatchNorm: statistics of the global batch --------------------------------
    try:
        torch.manual_seed(3)
        full = torch.rand(4 * n, 5, 3, 3)
        sbn = xf.SyncBatchNorm(5).to(dev)
        out = sbn(full[4 * r:4 * (r + 1)].to(dev))
        (out * out).sum().backward()
        xm.mark_step()
        ref = torch.nn.BatchNorm2d(5)
        ref_out = ref(full)
        np.testing.assert_allclose(out.detach().cpu().numpy(), ref_out[4 * r:4 * (r + 1)].detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(sbn.running_mean.cpu().numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(sbn.running_var.cpu().numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-6)
        checks["functions.SyncBatchNorm"] = "ok"
    except Exception:  # noqa: BLE001
        checks["functions.SyncBatchNorm"] = "FAIL: " + traceback.format_exc()[-400:]

    # -- host side: rendezvous, mesh_reduce, save, do_on_ordinals, runtime ------------------------
    try:
        got = xm.rendezvous("payloads", f"from-{r}".encode())
        assert got == [f"from-{m}".encode() for m in range(n)], got
        got2 = xm.rendezvous("payloads", b"x" * (r + 1))  # a second round of the same tag
        assert got2 == [b"x" * (m + 1) for m in range(n)], got2
        checks["rendezvous"] = "ok"
        total = xm.mesh_reduce("mr", torch.tensor([float(r)]), lambda xs: torch.stack(xs).sum().item())
        assert total == n * (n - 1) / 2, total
        lst = xm.mesh_reduce("mr2", {"r": r}, lambda xs: [d["r"] for d in xs])
        assert lst == list(range(n)), lst
        checks["mesh_reduce"] = "ok"
        d = os.environ.get("TEST_TMPDIR") or tempfile.gettempdir()
        path = os.path.join(d, f"xm_save_{os.getppid()}.pt")
        xm.save({"w": T(np.full(2, float(r), np.float32))}, path)
        loaded = torch.load(path)
        assert loaded["w"].tolist() == [0.0, 0.0], loaded  # the master's data, readable by all after save
        checks["save[master_only]"] = "ok"
        marks = []
        xm.do_on_ordinals(lambda: marks.append(r), (), ordinals=(1,))
        assert marks == ([1] if r == 1 else []), marks
        checks["do_on_ordinals"] = "ok"
        rt = dict(world_size=xr.world_size(), global_ordinal=xr.global_ordinal(),
                  local_ordinal=xr.local_ordinal(), process_index=xr.process_index(),
                  process_count=xr.process_count(), local_process_count=xr.local_process_count(),
                  local_device_count=xr.local_device_count(), addressable_device_count=xr.addressable_device_count(),
                  global_device_count=xr.global_device_count(),
                  global_runtime_device_count=xr.global_runtime_device_count(),
                  get_ordinal=xm.get_ordinal(), get_local_ordinal=xm.get_local_ordinal(),
                  xrt_world_size=xm.xrt_world_size(), is_master=xm.is_master_ordinal(local=False),
                  devices=[str(d) for d in torch_xla.devices()], master_ip=xr.get_master_ip())
        want = dict(world_size=n, global_ordinal=r, local_ordinal=r, process_index=r, process_count=n,
                    local_process_count=n, local_device_count=n, addressable_device_count=1,
                    global_device_count=n, global_runtime_device_count=n, get_ordinal=r, get_local_ordinal=r,
                    xrt_world_size=n, is_master=r == 0, devices=["xla:0"], master_ip="127.0.0.1")
        assert rt == want, (rt, want)
        checks["runtime"] = "ok"
    except Exception:  # noqa: BLE001
        checks["host"] = "FAIL: " + traceback.format_exc()[-600:]

    try:
        # a job-wide program no other check builds: XLA compiles it in one process, the others load it
        from torch_xla.debug import metrics as met
        before = met.counter_value("SharedCompileLoad") or 0
        x = T(np.full((7, 13), r + 1.0, np.float32))
        s = xm.all_reduce(xm.REDUCE_SUM, torch.tanh(x) + x)
        xm.mark_step()
        loads = [int(v) for v in xm.rendezvous("shared_compile",
                                               str((met.counter_value("SharedCompileLoad") or 0) - before).encode())]
        want = sum(np.tanh(np.float32(k + 1)) + (k + 1) for k in range(n))
        np.testing.assert_allclose(s.cpu().numpy(), np.full((7, 13), want, np.float32), rtol=1e-6)
        checks["compile_shared[one compile per job]"] = "ok" if sorted(loads) == [0] + [1] * (n - 1) else \
            f"loads per rank {loads}"
    except Exception:  # noqa: BLE001
        checks["compile_shared[one compile per job]"] = "FAIL: " + traceback.format_exc()[-600:]

    everything = xm.rendezvous("results", json.dumps({"rank": r, "checks": checks}).encode())
    if r == 0:
        with open(out_path, "w") as f:
            json.dump([json.loads(e) for e in everything], f, indent=1)


def _again(index, out_path):
    """A second job from the same parent (fit, then test)."""
    x = torch.ones(2, device=torch_xla.device()) * (index + 1)
    s = xm.all_reduce(xm.REDUCE_SUM, x)
    xm.mark_step()
    got = xm.rendezvous("again", f"{index}:{s.cpu().tolist()}".encode())
    if index == 0:
        with open(out_path + ".again", "w") as f:
            json.dump({"world": xr.world_size(), "got": [g.decode() for g in got]}, f)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
    torch_xla.launch(_again, args=(sys.argv[1],))
    from torch_xla.engine.runtime import platform as runtime
    assert not runtime.is_initialized(), "the parent started a JAX backend"
    print("parent never started JAX")
