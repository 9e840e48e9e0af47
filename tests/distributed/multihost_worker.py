"""Run on each "host" with the same MASTER_ADDR/MASTER_PORT and XLA_NUM_HOSTS:
the launchers form one job. Ordinal 0 writes every replica's view to argv[1]."""
import json
import sys

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _mp_fn(index, out_path):
    dev = torch_xla.device()
    x = torch.arange(3, dtype=torch.float32, device=dev) * (index + 1)
    y = xm.all_reduce(xm.REDUCE_SUM, x)
    xm.mark_step()
    rec = {"ordinal": index, "world": xr.world_size(), "host": xr.host_index(),
           "local_ordinal": xr.local_ordinal(), "local_count": xr.local_process_count(),
           "all_reduce": y.cpu().tolist()}
    recs = xm.rendezvous("multihost", json.dumps(rec).encode())
    if index == 0:
        with open(out_path, "w") as f:
            json.dump([json.loads(r) for r in recs], f)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
