"""torch_xla.utils.serialization: save and load tensor-bearing objects.

`save` moves XLA tensors to the CPU and writes with torch.save (only the master
ordinal writes unless master_only=False); `load` reads it back, on the CPU
unless a device is given."""
import os

import torch


class TensorReference:
    """Placeholder upstream's sharded save format leaves in the pickled data for the
    tensor stored as `<path>.tensors/tensor_<tid>.pt`; load() resolves it."""

    def __init__(self, tid):
        self.tid = tid


def _resolve_references(path, data):
    folder = path + ".tensors"
    if not isinstance(path, str) or not os.path.isdir(folder):
        return data
    from . import utils as xu
    return xu.for_each_instance_rewrite(
        data, lambda v: isinstance(v, TensorReference),
        lambda ref: torch.load(os.path.join(folder, f"tensor_{ref.tid}.pt"), weights_only=False))


def save(data, path, master_only=True, global_master=False):
    """Save `data`, whose XLA tensors are stored as CPU tensors."""
    from ..core import xla_model as xm
    xm.save(data, path, master_only=master_only, global_master=global_master)


def load(path, device=None):
    """Load what `save` wrote; with `device`, move every tensor there."""
    data = _resolve_references(path, torch.load(path, weights_only=False))
    if device is None:
        return data

    def move(x):
        if isinstance(x, torch.Tensor):
            return x.to(device)
        if isinstance(x, dict):
            return type(x)((k, move(v)) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        return x
    return move(data)
