"""Several XLA devices in one process (`xla:0`..`xla:N-1`).

A process that no launcher started and that is not in SPMD mode addresses
every local device, as upstream's does (`CPU_NUM_DEVICES=4` gives four). Until
a device other than `xla:0` is named nothing here runs: tracing stays the
one-device path. The first time one is named, `activate()` switches
XLATensor's dispatch to `_placed_dispatch`, which finds the device each op
works on (its tensors', or the target of a copy), refuses tensors of two
devices in one op as eager PyTorch does, and makes that device the one new
tensors and uploads belong to while the op is traced. A barrier then runs one
graph per device (`split`), each compiled for and launched on its device.

PyTorch's Python device guard reports one device, and autograd's engine keeps
one worker queue per device index it was told about, so backward through
tensors on `xla:1` and above runs on the calling thread
(torch.autograd.set_multithreading_enabled(False) on the thread that first
named the device).
"""
import torch

from ..runtime import topology
from . import tensor

active = False
_devices = {}


def xla_device(index):
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device("xla", index)
    return d


def resolve(device):
    """`device` (a torch.device or string of type xla) -> its index (a bare `xla`
    names the default device)."""
    index = torch.device(device).index
    return topology.default_device_index() if index is None else index


def activate():
    """A device other than xla:0 is in use: trace with placement from now on."""
    global active
    if active:
        return
    active = True
    try:
        torch.autograd.set_multithreading_enabled(False).__enter__()
    except Exception:  # noqa: BLE001 - an older torch without the switch
        pass
    tensor.set_dispatch_wrapper("placement", _placed_dispatch)


def set_default(index):
    """torch_xla.device(n): a bare `xla` names xla:<n> from now on."""
    if index:
        activate()
    topology.set_default_device_index(index)
    tensor.set_default_device(xla_device(index))


# ops whose tensors may sit on two devices: the result goes where the copy goes
_COPIES = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "to"}


def _tensor_devices(a, out):
    if isinstance(a, tensor.XLATensor):
        out.append(a.device)
    elif type(a) in (list, tuple):
        for x in a:
            if isinstance(x, tensor.XLATensor):
                out.append(x.device)


def op_device(func, args, kwargs):
    """The device an op works on; RuntimeError for tensors of two devices."""
    name = func.__name__.split(".")[0]
    if name in _COPIES:
        target = kwargs.get("device")
        if target is not None and torch.device(target).type == "xla":
            return xla_device(resolve(target))
        if name == "copy_" and isinstance(args[0], tensor.XLATensor):
            return args[0].device
    found = []
    for a in args:
        _tensor_devices(a, found)
    for a in kwargs.values():
        _tensor_devices(a, found)
    if not found:
        return tensor.default_device()
    first = found[0]
    if name not in _COPIES:
        for d in found:
            if d != first:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, "
                    f"{first} and {d}! (in aten::{func.__name__})")
    return first


def on_device(index, fn, *args):
    """fn(*args) with xla:<index> as the device new tensors and uploads belong to."""
    dev = xla_device(index)
    prev = tensor.default_device()
    if dev == prev:
        return fn(*args)
    tensor.set_default_device(dev)
    before = topology.place(index)
    try:
        return fn(*args)
    finally:
        tensor.set_default_device(prev)
        topology.place(before)


def _placed_dispatch(inner, cls, func, types, args, kwargs):
    dev = op_device(func, args, kwargs or {})
    return on_device(dev.index, inner, cls, func, types, args, kwargs)


def split(bases):
    """Bases to run at a barrier, grouped by device (one graph each)."""
    if not bases:
        return ()
    if not active:
        return (bases,)
    groups = {}
    for b in bases:
        groups.setdefault(b.device, []).append(b)
    return tuple(groups[k] for k in sorted(groups))



class DeviceIndexError(IndexError, ValueError):
    """An `xla:N` this process does not address: an IndexError as upstream's
    torch_xla.device(n) raises, and a ValueError as a bad device argument."""


def check_index(device):
    """`xla:N` must be a device this process addresses, whichever path names it
    (a factory's device=, .to(), torch.tensor(..., device=)): every local device
    for a process that no launcher started (outside SPMD), else xla:0 alone.
    Naming xla:N with N > 0 turns on per-device placement."""
    if device is None:
        return
    d = torch.device(device)
    if d.type != "xla" or d.index in (None, 0):
        return
    n = topology.addressable_device_count()
    if d.index >= n:
        if n == 1:
            raise DeviceIndexError(
                f"torch_xla: this process owns one XLA device (xla:0); got {d}. "
                + ("A process started by torch_xla.launch / xmp.spawn drives its own device; "
                   if topology.mode() == topology.MULTIPROCESS else
                   "In SPMD mode xla:0 stands for every device; " if topology.mode() == topology.SPMD else
                   "Set CPU_NUM_DEVICES (or use a machine with more devices) to address several in one process, ")
                + "or use one process per device (torch_xla.launch / xmp.spawn) or SPMD.")
        raise DeviceIndexError(f"torch_xla: {d} does not exist; this process addresses {n} XLA devices "
                               f"(xla:0 to xla:{n - 1})")
    activate()
