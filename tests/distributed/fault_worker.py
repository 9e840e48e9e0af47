"""Replicas that fail: `raise`, `kill` (SIGKILL itself) or `hang` (never reaches
the collective the others wait on). Each replica writes its pid to <dir>/pid.<rank>.

    python fault_worker.py <mode> <dir>
"""
import os
import signal
import sys
import time

import torch

import torch_xla
import torch_xla.core.xla_model as xm


def _mp_fn(index, mode, d):
    with open(os.path.join(d, f"pid.{index}"), "w") as f:
        f.write(str(os.getpid()))
    dev = torch_xla.device()
    x = torch.ones(4, device=dev) * (index + 1)
    xm.all_reduce(xm.REDUCE_SUM, x)  # a first collective all replicas reach
    xm.mark_step()
    assert x.cpu()[0].item() > 0
    if index == 1:
        if mode == "raise":
            raise ValueError("replica 1 failed on purpose")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(3600)
    # the others wait on a collective replica 1 never joins
    y = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=dev) * 3)
    xm.mark_step()
    print(y.cpu())
    time.sleep(3600)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1], sys.argv[2]))
