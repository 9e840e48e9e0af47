"""Uses the XLA device, then asks for forked replicas (as Lightning's launcher
does): the job must still run (fresh processes) instead of hanging.

    python fork_after_init_worker.py OUT
"""
import json
import sys

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp


def _replica(index, out):
    x = torch.ones(2, device=torch_xla.device()) * (index + 1)
    xm.all_reduce(xm.REDUCE_SUM, [x])
    xm.mark_step()
    with open(f"{out}.{index}", "w") as f:
        json.dump(x.cpu().tolist(), f)


if __name__ == "__main__":
    (torch.ones(3, device=torch_xla.device()) * 2).sum().item()   # the runtime is up in the launcher
    xmp.spawn(_replica, args=(sys.argv[1],), start_method="fork")
