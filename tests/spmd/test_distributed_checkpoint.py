"""torch_xla.experimental.distributed_checkpoint: shard-level save on one mesh, load on
another mesh and on one device; CheckpointManager's retention and crash safety.
Each step runs in its own process (dcp_worker.py): the mesh is fixed when JAX starts."""
import json
import os

from test_spmd import _run


def _report(args, devices, expect_rc=0):
    p = _run(["dcp_worker.py", *args], devices)
    assert p.returncode == expect_rc, p.stdout[-3000:] + p.stderr[-3000:]
    return [json.loads(x[len("REPORT "):]) for x in p.stdout.splitlines() if x.startswith("REPORT ")]


def test_save_on_4x1_load_on_2x2_and_on_one_device(tmp_path):
    path = str(tmp_path / "ck")
    saved = _report(["save", "4", "1", path], 4)[-1]
    # the (4,1) layout: fc1.weight split 4 ways by rows, fc2.weight by columns
    assert saved["specs"]["0.weight"] == "{devices=[4,1]0,1,2,3}"
    assert saved["specs"]["2.weight"] == "{devices=[1,4]0,1,2,3}"
    loaded = _report(["load", "2", "2", path], 4)[-1]
    assert loaded["values"] == saved["values"]
    # the target keeps its own (2,2) layout
    assert loaded["specs"] == loaded["specs_before"]
    assert loaded["specs"]["0.weight"] == "{devices=[2,2]0,1,2,3}"
    single = _report(["single", path], 1)[-1]
    assert single["values"] == saved["values"]


def test_manager_keeps_the_last_checkpoint_when_killed_during_save_async(tmp_path):
    path = str(tmp_path / "mgr")
    first = _report(["crash", path], 4, expect_rc=-9)
    assert first[0]["steps"] == [10, 20]
    after = _report(["after", path], 4)[-1]
    assert after["steps"] == [10, 20]          # the interrupted step 30 is not listed
    assert after["values"] == first[0]["values"]
    assert after["after_save"] == [10, 20, 40]  # and saving goes on
    assert "30.partial" in after["dirs"] and "30" not in after["dirs"]


def test_manager_max_to_keep_and_restore_in_one_process(tmp_path):
    p = _run(["-c", _MAX_TO_KEEP, str(tmp_path)], 4)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["kept"] == [30, 40]
    assert sorted(os.listdir(tmp_path)) == ["30", "40"]
    assert r["restored_equal"] and r["not_saved"] is False


_MAX_TO_KEEP = r"""
import json, sys, numpy as np, torch, torch_xla, torch_xla.runtime as xr
xr.use_spmd()
import torch_xla.distributed.spmd as xs
from torch_xla.experimental.distributed_checkpoint import CheckpointManager
mesh = xs.Mesh(np.arange(4), (4,), ("d",))
w = torch.arange(32.).reshape(8, 4).to("xla"); xs.mark_sharding(w, mesh, ("d", None))
mgr = CheckpointManager(sys.argv[1], save_interval=10, max_to_keep=2, chkpt_on_preemption=False)
not_saved = mgr.save(5, {"w": w})
for step in (10, 20, 30):
    mgr.save(step, {"w": w})
mgr.save_async(40, {"w": w * 2}); mgr.join()
target = torch.zeros(8, 4).to("xla"); xs.mark_sharding(target, mesh, (None, "d"))
sd = {"w": target}; mgr.restore(40, sd)
print(json.dumps({"kept": sorted(mgr.all_steps()), "not_saved": not_saved,
                  "restored_equal": bool(torch.equal(sd["w"].cpu(), (w * 2).cpu()))}))
"""
