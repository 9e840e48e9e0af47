"""torch.save / torch.load of XLA tensors, as upstream: a tensor saved from
`xla:N` loads back on `xla:N` (or on the default device when this process has
no such device), and `torch.load(..., map_location="cpu")` gives CPU tensors.

An XLA tensor pickles as its CPU copy (an ordinary tensor storage in the file,
so `weights_only=True` loads it) wrapped in `rebuild`. The storage is tagged
with the XLA device through torch.serialization's location registry; at load
time torch hands that tag to `_restore` unless `map_location` replaced it, and
`rebuild` moves the tensor to the device only when it was restored with an
`xla` tag.
"""
import pathlib
import weakref

import torch

from ..runtime import topology

_saving = weakref.WeakValueDictionary()   # storage data_ptr -> CPU copy being saved
_loading = {}                             # storage data_ptr -> "xla:N" restored with an xla tag


def reduce(t, proto):
    cpu = t.detach().cpu()
    if cpu.numel() == 0:
        return rebuild_empty, (tuple(cpu.shape), cpu.dtype, str(t.device), t.requires_grad)
    cpu = cpu.contiguous()
    ptr = cpu.untyped_storage().data_ptr()
    cpu._xla_saved_from = str(t.device)
    _saving[ptr] = cpu
    return rebuild, (cpu, t.requires_grad)


def _tag(storage):
    ptr = storage.data_ptr()
    cpu = _saving.get(ptr) if ptr else None
    if cpu is None or cpu.untyped_storage().data_ptr() != ptr:
        return None
    return cpu._xla_saved_from


def _restore(storage, location):
    if not location.startswith("xla"):
        return None
    _loading[storage.data_ptr()] = location
    return storage


def _device(location):
    index = torch.device(location).index or 0
    if index >= topology.addressable_device_count():
        index = topology.default_device_index()
    return torch.device("xla", index)


def rebuild(cpu, requires_grad=False):
    """A tensor loaded from a file: on the XLA device it was saved from, unless
    map_location sent its storage elsewhere."""
    location = _loading.pop(cpu.untyped_storage().data_ptr(), None)
    out = cpu.to(_device(location)) if location is not None else cpu
    if hasattr(out, "_xla_saved_from"):   # pickled and unpickled in one process (copy, queues)
        del out._xla_saved_from
    if requires_grad:
        out.requires_grad_(True)
    return out


def rebuild_empty(shape, dtype, device, requires_grad=False):
    out = torch.empty(shape, dtype=dtype, device=_device(device))
    if requires_grad:
        out.requires_grad_(True)
    return out


_installed = []


def install():
    if _installed:
        return
    _installed.append(True)
    torch.serialization.register_package(5, _tag, _restore)
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:   # weights_only=True loads them
        add([rebuild, rebuild_empty])
        # and file paths: Lightning's XLA strategies broadcast pickled objects (a
        # checkpoint's Path among them) and read them back with a bare torch.load,
        # which weights_only refuses for a Path; building one runs no code
        add([pathlib.PosixPath, pathlib.PurePosixPath, pathlib.PureWindowsPath])
