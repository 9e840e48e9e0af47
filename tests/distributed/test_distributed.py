"""Many devices: launchers, collectives, host exchange, torch.distributed, faults.

Multi-process jobs are few and batched (one job checks every collective and
writes a result file); each runs in its own session with a timeout and is
killed as a group afterwards. Loopback only.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**kw):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID", "XLA_COORDINATOR_ADDRESS", "XLA_NUM_HOSTS", "XLA_HOST_INDEX",
              "XLA_USE_SPMD"):
        env.pop(k, None)
    env.update(PJRT_DEVICE="CPU", MASTER_ADDR="127.0.0.1", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    env.update({k: str(v) for k, v in kw.items()})
    return env


def _start(args, env, cwd=None):
    return subprocess.Popen([sys.executable] + args, env=env, cwd=cwd or HERE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(p, timeout):
    """-> (returncode, output, seconds). Kills the whole session on timeout or after."""
    t0 = time.monotonic()
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        out, _ = p.communicate()
        pytest.fail(f"job timed out after {timeout}s:\n{out[-4000:]}")
    finally:
        _kill_group(p.pid)
    return p.returncode, out, time.monotonic() - t0


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _run(args, timeout=240, **env):
    p = _start(args, _env(**env))
    return _finish(p, timeout)


def _pids_alive(d):
    alive = []
    for name in os.listdir(d):
        if name.startswith("pid."):
            pid = int(open(os.path.join(d, name)).read())
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
    return alive


# ---------------------------------------------------------------------------
# one process: no-op collectives, host exchange, runtime, the parallel loader

def test_single_process_collectives_are_copies():
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    if xr.world_size() != 1:
        pytest.skip("runs in a single-process test session")
    dev = torch_xla.device()
    x = torch.arange(6.0).reshape(2, 3).to(dev)
    y = xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5)
    assert y is not x and torch.equal(y.cpu(), x.cpu())  # upstream: a clone, scale unused
    lst = [x]
    assert xm.all_reduce(xm.REDUCE_MAX, lst) is lst
    assert torch.equal(xm.all_gather(x, dim=1).cpu(), x.cpu())
    assert torch.equal(xm.reduce_scatter(xm.REDUCE_SUM, x, 2.0, 0, 1).cpu(), 2 * x.cpu())
    assert torch.equal(xm.all_to_all(x, 0, 0, 1).cpu(), x.cpu())
    assert torch.equal(xm.collective_permute(x, [(0, 0)]).cpu(), x.cpu())
    xm.collective_broadcast([x])
    assert xm.rendezvous("solo", b"abc") == [b"abc"]
    assert xm.mesh_reduce("solo", 3.0, sum) == 3.0
    with pytest.raises(NotImplementedError, match="collective_permute"):
        xm.send(x, 0)
    import torch_xla.core.functions as xf
    xr_ = x.clone().requires_grad_(True)
    xf.all_gather(xr_).sum().backward()
    assert torch.equal(xr_.grad.cpu(), torch.ones(2, 3))


class _WritesFile:
    """Unpickling this creates a file: the proof that a payload ran code."""
    path = None

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_mesh_reduce_loads_other_processes_data_as_data_only(monkeypatch, tmp_path):
    import io
    import pickle
    import torch_xla.runtime as xr
    from torch_xla.distributed import host_exchange
    flag = tmp_path / "ran"
    _WritesFile.path = str(flag)
    forged = pickle.dumps(_WritesFile())   # what another writer to the store could send
    buf = io.BytesIO()
    torch.save({"acc": torch.tensor([0.5]), "n": 3, "tag": "x"}, buf)
    honest = buf.getvalue()
    monkeypatch.setattr(xr, "world_size", lambda: 2)
    monkeypatch.setattr(host_exchange, "rendezvous", lambda tag, payload: [honest, honest])
    got = host_exchange.mesh_reduce("t", {"acc": torch.tensor([0.5]), "n": 3, "tag": "x"}, lambda xs: xs)
    assert [d["n"] for d in got] == [3, 3] and torch.equal(got[1]["acc"], torch.tensor([0.5]))
    for payload in (forged, _torch_saved(_WritesFile())):
        monkeypatch.setattr(host_exchange, "rendezvous", lambda tag, p, payload=payload: [honest, payload])
        with pytest.raises(RuntimeError, match="ordinal 1 does not load as plain data"):
            host_exchange.mesh_reduce("t", 1.0, lambda xs: xs)
        assert not flag.exists()


def _torch_saved(obj):
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_runtime_from_environment(monkeypatch):
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    # start this process's runtime first, so the fake job below cannot reach it
    assert (torch.ones(2, device=torch_xla.device()) + 1).cpu().tolist() == [2.0, 2.0]
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("GROUP_RANK", "1")
    assert (xr.world_size(), xr.global_ordinal(), xr.local_ordinal(), xr.local_process_count()) == (8, 5, 1, 4)
    assert (xr.process_index(), xr.process_count(), xr.host_index()) == (5, 8, 1)
    assert (xr.local_device_count(), xr.addressable_device_count(), xr.global_device_count()) == (4, 1, 8)
    assert (xm.get_ordinal(), xm.get_local_ordinal(), xm.xrt_world_size()) == (5, 1, 8)
    assert not xm.is_master_ordinal(local=False) and not xm.is_master_ordinal()
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert xm.is_master_ordinal(local=True) and not xm.is_master_ordinal(local=False)


def test_spawn_nprocs_1_runs_in_process():
    import torch_xla.distributed.xla_multiprocessing as xmp
    seen = []
    assert xmp.spawn(lambda i, a: seen.append((i, a)), args=("x",), nprocs=1) is None
    assert seen == [(0, "x")]


def _loader(n=10, bs=4):
    ds = torch.utils.data.TensorDataset(torch.arange(n * bs, dtype=torch.float32).reshape(n * bs, 1),
                                        torch.arange(n * bs))
    return torch.utils.data.DataLoader(ds, batch_size=bs)


def test_mp_device_loader_order_len_and_epochs():
    import threading
    import torch_xla
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.parallel_loader as pl
    dev = torch_xla.device()
    loader = pl.MpDeviceLoader(_loader(), dev, host_to_device_transfer_threads=3, device_prefetch_size=2)
    assert len(loader) == 10 and loader._loader is not None
    for _ in range(2):  # two epochs from the same loader
        before = met.counter_value("MarkStep") or 0
        seen = []
        for x, y in loader:
            assert x.device.type == "xla"
            seen.append(int(y.cpu()[0]))
        assert seen == [4 * i for i in range(10)]
        # as upstream: one per batch, one when the end is found, one more at the end
        assert (met.counter_value("MarkStep") or 0) - before == 12
    time.sleep(0.5)
    assert not [t for t in threading.enumerate() if t.name.startswith(("torch_xla-loader", "torch_xla-h2d"))]


def test_parallel_loader_batches_per_execution_and_break():
    import threading
    import torch_xla
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.parallel_loader as pl
    dev = torch_xla.device()
    para = pl.ParallelLoader(_loader(), [dev], batches_per_execution=3)
    it = para.per_device_loader(dev)
    assert len(it) == 10
    before = met.counter_value("MarkStep") or 0
    n = sum(1 for _ in it)
    assert n == 10 and (met.counter_value("MarkStep") or 0) - before == 4  # after batches 2, 5, 8 and at the end
    loader = pl.MpDeviceLoader(_loader(50), dev, loader_prefetch_size=2, device_prefetch_size=1)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    loader._current.close()
    deadline = time.time() + 5
    while time.time() < deadline and [t for t in threading.enumerate()
                                      if t.name.startswith(("torch_xla-loader", "torch_xla-h2d"))]:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith(("torch_xla-loader", "torch_xla-h2d"))]


def test_parallel_loader_reraises_worker_errors():
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    class Bad(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                raise KeyError("bad sample 5")
            return torch.tensor([float(i)])

    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(Bad(), batch_size=2), torch_xla.device())
    got = []
    with pytest.raises(KeyError, match="bad sample 5"):
        for x in loader:
            got.append(x.cpu())
    assert len(got) == 2


# ---------------------------------------------------------------------------
# multi-process jobs

def _check_collectives(n, tmp_path):
    out = tmp_path / f"collectives{n}.json"
    rc, log, secs = _run(["collectives_worker.py", str(out)], timeout=300, CPU_NUM_DEVICES=n,
                         TEST_TMPDIR=str(tmp_path))
    assert rc == 0, log[-5000:]
    recs = json.loads(out.read_text())
    assert [r["rank"] for r in recs] == list(range(n))
    # the same parent spawned a second job afterwards, without ever starting JAX itself
    assert "parent never started JAX" in log
    again = json.loads((tmp_path / f"collectives{n}.json.again").read_text())
    total = float(sum(range(1, n + 1)))
    assert again == {"world": n, "got": [f"{i}:{[total, total]}" for i in range(n)]}
    for rec in recs:
        bad = {k: v for k, v in rec["checks"].items() if v != "ok"}
        assert not bad, f"rank {rec['rank']}: {bad}"
        assert len(rec["checks"]) > 50
    return recs


def test_collectives_2_processes(tmp_path):
    _check_collectives(2, tmp_path)


@pytest.mark.slow
def test_collectives_4_processes(tmp_path):
    recs = _check_collectives(4, tmp_path)
    assert any("groups2" in k for k in recs[0]["checks"])


@pytest.mark.parametrize("launcher", ["torchrun", pytest.param("launch", marks=pytest.mark.slow)])
def test_ddp(tmp_path, launcher):
    """Upstream's DDP example, under torchrun (the script calls torch_xla.launch, which
    joins the torchrun job instead of spawning) and spawned by torch_xla.launch."""
    out = tmp_path / "ddp.jsonl"
    if launcher == "torchrun":
        rc, log, secs = _run(["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                              f"--master_port={_free_port()}", "ddp_worker.py", str(out)], timeout=240)
    else:
        rc, log, secs = _run(["ddp_worker.py", str(out)], timeout=240, CPU_NUM_DEVICES=2)
    assert rc == 0, log[-5000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["rank"] for r in recs] == [0, 1] and all(r["xr_world"] == 2 for r in recs)
    assert recs[0]["params"] == recs[1]["params"]  # DDP kept the replicas identical
    assert recs[0]["losses"] != recs[1]["losses"]  # on different data
    for r in recs:
        k = r["rank"]
        assert r["all_reduce"] == [3.0] * 3
        assert r["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
        assert r["broadcast"] == [6.0, 6.0]
        assert r["reduce_scatter"] == [float(0 * 10 + k + 1 * 10 + k)] * 2
        assert r["all_to_all"] == [[float(0 * 10 + k)], [float(1 * 10 + k)]]


def _fault_start(mode, tmp_path, **env):
    d = tmp_path / mode
    d.mkdir()
    return _start(["fault_worker.py", mode, str(d)], _env(CPU_NUM_DEVICES=2, **env)), d, time.monotonic()


def _fault_finish(p, d, t0, mode):
    try:
        out, _ = p.communicate(timeout=max(1.0, 120 - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        out, _ = p.communicate()
        pytest.fail(f"{mode}: the job did not end:\n{out[-4000:]}")
    secs = time.monotonic() - t0
    deadline = time.time() + 5  # multiprocessing's resource tracker leaves once it sees EOF
    while time.time() < deadline and (_pids_alive(d) or _group_alive(p.pid)):
        time.sleep(0.2)
    alive = _pids_alive(d)
    group = _group_alive(p.pid)
    if group:
        group = subprocess.run(["ps", "-o", "pid,stat,args", "-g", str(p.pid)], capture_output=True,
                               text=True).stdout
    _kill_group(p.pid)
    assert len([f for f in os.listdir(d) if f.startswith("pid.")]) == 2
    return p.returncode, out, secs, alive, group


def _fault(mode, tmp_path, **env):
    return _fault_finish(*_fault_start(mode, tmp_path, **env), mode)


def test_fault_raising_and_killed_replicas(tmp_path):
    """Two jobs at once: in one a replica raises, in the other one is SIGKILLed."""
    raising = _fault_start("raise", tmp_path)
    killed = _fault_start("kill", tmp_path)
    rc, out, secs, alive, group = _fault_finish(*raising, "raise")
    assert rc != 0 and secs < 60, (rc, secs)
    assert "replica 1 failed on purpose" in out and "Traceback" in out
    assert "ReplicaFailed" in out
    # the launcher prints the replica's traceback once, inside ReplicaFailed
    assert out.count('raise ValueError("replica 1 failed on purpose")') == 1, out[-4000:]
    assert "starting 2 replica processes on CPU" in out
    assert not alive and not group, (alive, group)
    rc, out, secs, alive, group = _fault_finish(*killed, "kill")
    assert rc != 0 and secs < 60, (rc, secs)
    assert "replica 1" in out and "SIGKILL" in out
    assert not alive and not group, (alive, group)


@pytest.mark.slow
def test_fault_replica_never_reaches_collective(tmp_path):
    rc, out, secs, alive, group = _fault("hang", tmp_path, XLA_COLLECTIVE_TIMEOUT=4)
    assert rc != 0 and secs < 60, (rc, secs, out[-3000:])
    assert "never reached it: 1 (at collective step" in out, out[-3000:]
    assert "all_reduce(sum" in out
    assert not alive and not group


@pytest.mark.slow
def test_two_launchers_form_one_job(tmp_path):
    out = tmp_path / "mh.json"
    env = _env(CPU_NUM_DEVICES=2, XLA_NUM_HOSTS=2, MASTER_PORT=_free_port())
    a = _start(["multihost_worker.py", str(out)], env)
    time.sleep(1.0)
    b = _start(["multihost_worker.py", str(out)], env)
    rb, logb, _ = _finish(b, 240)
    ra, loga, _ = _finish(a, 60)
    assert ra == 0 and rb == 0, (loga[-3000:], logb[-3000:])
    recs = json.loads(out.read_text())
    assert [r["ordinal"] for r in recs] == [0, 1, 2, 3]
    assert [r["host"] for r in recs] == [0, 0, 1, 1]
    assert [r["local_ordinal"] for r in recs] == [0, 1, 0, 1]
    want = (np.arange(3) * sum(range(1, 5))).tolist()
    assert all(r["all_reduce"] == want and r["world"] == 4 for r in recs)


@pytest.mark.slow
def test_mnist_mp_example_bit_identical(tmp_path):
    out = tmp_path / "mnist.json"
    rc, log, secs = _run([os.path.join(ROOT, "examples", "train_mnist_mp.py"), "--num_epochs", "2",
                          "--batch_size", "64", "--result_file", str(out)], timeout=420, CPU_NUM_DEVICES=4)
    assert rc == 0, log[-5000:]
    res = json.loads(out.read_text())
    assert res["world_size"] == 4 and res["identical"] == [True, True]
    assert res["accuracy"] > 50.0
    assert "params bit-identical across 4 replicas: True" in log
    # a launch line first; JAX's gloo connection chatter is filtered out of stdout
    assert log.lstrip().startswith("torch_xla: starting 4 replica processes"), log[:500]
    assert "[Gloo]" not in log and "4 replicas ready" in log



def test_ddp_bucket_views_compile_without_constant_folding(tmp_path):
    """DDP's gradient buckets are contiguous views of one flat tensor: as_strided
    of a contiguous block is a slice (no large index constant for XLA to fold)."""
    import numpy as np
    import jax
    from torch_xla.engine.ops import shape_ops
    flat = np.arange(24.0, dtype=np.float32)
    got = shape_ops._as_strided(jax.numpy.asarray(flat), [2, 3], [3, 1], 6)
    assert np.asarray(got).tolist() == flat[6:12].reshape(2, 3).tolist()
    hlo = jax.jit(lambda x: shape_ops._as_strided(x, [400, 500], [500, 1], 1000)).lower(
        jax.ShapeDtypeStruct((300000,), np.float32)).as_text()
    assert "gather" not in hlo and "slice" in hlo
    upd = shape_ops._as_strided_scatter(jax.numpy.asarray(flat), jax.numpy.ones((2, 3)), [2, 3], [3, 1], 6)
    assert np.asarray(upd).tolist() == (flat[:6].tolist() + [1.0] * 6 + flat[12:].tolist())


def test_a_second_job_on_a_busy_port_fails_fast_and_leaves_the_first_alone():
    import socket
    import time as _t
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    worker = os.path.join(os.path.dirname(__file__), "port_worker.py")
    first = subprocess.Popen([sys.executable, worker, "12"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = _t.time() + 60
        while _t.time() < deadline:   # wait until the first job's coordinator listens
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            _t.sleep(0.2)
        t0 = _t.time()
        second = subprocess.run([sys.executable, worker, "0"], env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode != 0
        assert f"port {port}" in second.stderr and "in use by another job" in second.stderr
        assert _t.time() - t0 < 30
        out, err = first.communicate(timeout=180)
        assert first.returncode == 0, err[-2000:]
        assert "SUM [3.0, 3.0]" in out
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_fork_after_the_runtime_is_up_starts_fresh_processes(tmp_path):
    """Forking a process whose JAX runtime runs can hang a replica (locks held by
    threads that do not exist in the child): the launcher starts fresh ones."""
    out = tmp_path / "fork"
    rc, log, secs = _run([os.path.join(HERE, "fork_after_init_worker.py"), str(out)], timeout=180, CPU_NUM_DEVICES=2)
    assert rc == 0, log[-4000:]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"fork.{rank}").read_text()) == [3.0, 3.0]
