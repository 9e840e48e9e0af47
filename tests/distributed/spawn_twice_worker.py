"""fit then test: two xmp.spawn jobs from one parent, which never starts JAX itself."""
import sys

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def _job(index, tag, out_path):
    x = torch.ones(2, device=torch_xla.device()) * (index + 1)
    s = xm.all_reduce(xm.REDUCE_SUM, x)
    xm.mark_step()
    got = xm.rendezvous(tag, f"{index}:{s.cpu().tolist()}")
    if index == 0:
        with open(out_path, "a") as f:
            f.write(f"{tag} {xr.world_size()} {[g.decode() for g in got]}\n")


if __name__ == "__main__":
    for tag in ("fit", "test"):
        xmp.spawn(_job, args=(tag, sys.argv[1]))
    from torch_xla.engine import runtime
    assert not runtime.is_initialized(), "the parent started a JAX backend"
    print("parent never started JAX")
