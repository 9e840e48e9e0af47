"""Distributed checkpoint of SPMD state dicts, one step per process (the mesh is
fixed when JAX starts). Prints `REPORT <json>`.

python dcp_worker.py save   ROWS COLS PATH   trains 2 steps on a ROWS x COLS mesh, saves
python dcp_worker.py load   ROWS COLS PATH   loads into a model sharded on ROWS x COLS
python dcp_worker.py single PATH             loads into an unsharded model on one device
python dcp_worker.py crash  PATH             CheckpointManager: steps 10 and 20 saved,
                                             killed while save_async writes step 30
python dcp_worker.py after  PATH             what a new manager sees after the crash
"""
import json
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed.checkpoint as dist_cp
import torch.nn as nn

import torch_xla
import torch_xla.runtime as xr


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4))


def shard(m, rows, cols):
    import torch_xla.distributed.spmd as xs
    mesh = xs.Mesh(np.arange(rows * cols), (rows, cols), ("a", "b"))
    xs.mark_sharding(m[0].weight, mesh, ("a", "b"))
    xs.mark_sharding(m[2].weight, mesh, ("b", "a"))
    xs.mark_sharding(m[0].bias, mesh, ("a",))
    return mesh


def values(m):
    return {k: v.cpu().tolist() for k, v in m.state_dict().items()}


def specs(m):
    return {k: torch_xla._XLAC._get_xla_sharding_spec(v) for k, v in m.state_dict().items()}


def main(argv):
    mode = argv[0]
    if mode in ("save", "load", "crash", "after"):
        xr.use_spmd()
    from torch_xla.experimental.distributed_checkpoint import (CheckpointManager, SPMDLoadPlanner,
                                                               SPMDSavePlanner)
    dev = torch_xla.device()
    report = {}
    if mode == "save":
        rows, cols, path = int(argv[1]), int(argv[2]), argv[3]
        m = model(0).to(dev)
        shard(m, rows, cols)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            m(torch.ones(4, 16, device=dev)).sum().backward()
            opt.step()
            torch_xla.sync()
        dist_cp.save(state_dict=m.state_dict(), storage_writer=dist_cp.FileSystemWriter(path),
                     planner=SPMDSavePlanner())
        report = {"values": values(m), "specs": specs(m),
                  "files": sorted(f for f in os.listdir(path) if not f.startswith("."))}
    elif mode in ("load", "single"):
        m = model(1).to(dev)
        if mode == "load":
            rows, cols, path = int(argv[1]), int(argv[2]), argv[3]
            shard(m, rows, cols)
        else:
            path = argv[1]
        before = specs(m)
        sd = m.state_dict()
        dist_cp.load(state_dict=sd, storage_reader=dist_cp.FileSystemReader(path),
                     planner=SPMDLoadPlanner() if mode == "load" else None)
        m.load_state_dict(sd)
        report = {"values": values(m), "specs": specs(m), "specs_before": before}
    elif mode == "crash":
        path = argv[1]
        m = model(0).to(dev)
        shard(m, 2, 2)
        mgr = CheckpointManager(path, save_interval=10, max_to_keep=3, chkpt_on_preemption=False)
        assert mgr.save(10, m.state_dict()) and mgr.save(20, m.state_dict())
        print("REPORT " + json.dumps({"values": values(m), "steps": mgr.all_steps()}), flush=True)
        original = dist_cp.FileSystemWriter.write_data

        def killed_mid_write(self, plan, planner):
            os.kill(os.getpid(), signal.SIGKILL)   # as a preempted host dies: no cleanup at all
            return original(self, plan, planner)
        dist_cp.FileSystemWriter.write_data = killed_mid_write
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(3)
        mgr.save_async(30, m.state_dict())
        mgr.join()
        return 3   # not reached
    elif mode == "after":
        path = argv[1]
        m = model(5).to(dev)
        shard(m, 4, 1)
        mgr = CheckpointManager(path, save_interval=10, max_to_keep=3, chkpt_on_preemption=False)
        steps = mgr.all_steps()
        sd = m.state_dict()
        mgr.restore(max(steps), sd)
        m.load_state_dict(sd)
        mgr.save(40, m.state_dict())
        report = {"steps": steps, "values": values(m), "after_save": mgr.all_steps(),
                  "dirs": sorted(os.listdir(path))}
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
