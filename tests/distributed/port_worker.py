"""A job that holds its coordinator for a few seconds, then checks a collective."""
import sys
import time

import torch

import torch_xla
import torch_xla.core.xla_model as xm


def _mp_fn(index, hold):
    time.sleep(float(hold))
    t = torch.full((2,), float(index + 1), device=torch_xla.device())
    s = xm.all_reduce(xm.REDUCE_SUM, t).cpu().tolist()
    if index == 0:
        print("SUM", s, flush=True)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
