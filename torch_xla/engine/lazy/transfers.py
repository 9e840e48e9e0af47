"""Moving tensors between the host and the device, and host reads.

Every upload is counted in TransferToDeviceTime, every read in
TransferFromDeviceTime; a read executes only the graph the tensor needs.
"""
import math
import time

import jax
import torch

from ..base import events, metrics, profiling
from ..base.dtypes import numpy_to_torch
from ..ir import node as ir
from ..ops.op import fill_args
from ..ops.registry import handler
from ..runtime import topology
from . import device_groups, host, padding, views
from .device_groups import check_index
from .executor import materialize, sync
from .state import Base, value_of
from .tensor import XLATensor, new_base


def upload_array(cpu, device_index=None):
    dev = topology.upload_device() if device_index is None else topology.device_for(device_index)
    return host.transfer(host.host_array(cpu), dev, tuple(cpu.shape), cpu.dtype)


def upload_node(cpu, device_index=None):
    """A data leaf holding CPU tensor `cpu`'s value. In SPMD mode the value stays
    on the host until a sharding or a graph needs it (lazy/host.py)."""
    if cpu.layout is not torch.strided:
        raise RuntimeError(f"torch_xla: sparse tensors are not supported on the XLA device (layout {cpu.layout}, "
                           f"shape {list(cpu.shape)}); convert with .to_dense() first")
    if topology.spmd_enabled():   # one logical device: xla:0
        return host.hold(cpu)
    return ir.data_node(upload_array(cpu, device_index), tuple(cpu.shape), cpu.dtype)


def device_array(t):
    """The jax.Array holding t's current value (runs pending IR), of t's shape."""
    return padding.logical(stored_array(t), t._lazy.aval[0])


def stored_array(t):
    """The device array t's value is held in: padded under an uneven layout
    (lazy/padding.py), else t's value itself. Runs pending IR."""
    s = t._lazy
    device = t.device.index if device_groups.active else 0
    if type(s) is Base:
        return _base_array(s, device)
    if s.base.is_pending:
        sync([t], reason="tensor access")
    return materialize(value_of(t), s.aval, device)


def _base_array(b, device):
    """Base b's device data (computed now if pending; a Base held padded at
    rest is computed by a barrier, so it stays padded)."""
    v = b.value
    if v[0].kind == ir.OP and padding.wants_rest(b):
        sync([b], reason="tensor access")
        v = b.value
    arr = materialize(v, b.aval, device)
    if v[0].kind == ir.OP:
        b.computed(arr, expected=v)
    return arr


_HOST_VIEW_BYTES = 4 << 20


def _host_view(t):
    """t's value taken on the host from its base's: one transfer of the base and
    the view ops run by eager PyTorch, instead of a small graph compiled for each
    new view (`w.grad.cpu()` of a transposed gradient, `x[i].item()` in a loop).
    None when the base is large next to the view, or a step has no aten op."""
    view = t._lazy
    base = view.base
    kept = host.held(base)   # a base still on the host is read there, whatever its size
    shape, dtype = base.aval
    numel = math.prod(shape)
    if kept is None and numel * dtype.itemsize > _HOST_VIEW_BYTES and t.numel() * 4 < numel:
        return None
    steps = view.chain
    if any(entry.info.func is None for entry, _ in steps):
        return None
    if kept is not None:
        out = host.read(kept)
    else:
        arr = _base_array(base, base.device if device_groups.active else 0)
        out = _host_value(arr, base.aval)
    try:
        for entry, idx in steps:
            args, kwargs = fill_args(entry, [out])
            res = entry.info.func(*args, **kwargs)
            out = res[idx] if isinstance(res, (tuple, list)) else res
            # the device holds conj/neg values resolved; so must the host copy
            out = out.resolve_conj().resolve_neg()
    except RuntimeError:   # a step eager refuses here: compute the view on the device
        return None
    return out


def to_cpu(t):
    s = t._lazy
    if type(s) is not Base and s.chain:
        out = _host_view(t)
        if out is not None:
            return out
    else:
        kept = host.held(s if type(s) is Base else s.base)
        if kept is not None:   # still on the host (SPMD): a copy, no transfer
            return host.read(kept)
    return _host_value(stored_array(t), s.aval)


def _host_value(arr, aval):
    """A device array read back as a CPU tensor of aval (shape, dtype); padded
    data (lazy/padding.py) without its padding."""
    shape, dtype = aval
    t0 = time.perf_counter_ns()
    if len(arr.sharding.device_set) > 1:
        # shards (or copies) on several devices read as one value (upstream's
        # ReplicateShardedData, which counts every sharded handle it reads)
        metrics.counter("ReplicateShardedData")
    with profiling.region(profiling.TRANSFER_FROM_DEVICE):
        host = padding.host_logical(arr, shape)
    out = numpy_to_torch(host, dtype)
    metrics.metric("TransferFromDeviceTime", time.perf_counter_ns() - t0)
    metrics.metric("InboundData", host.nbytes, kind="bytes")
    if events.wanted("transferred"):
        events.emit("transferred", direction="from_device", shape=tuple(out.shape), dtype=dtype,
                    nbytes=host.nbytes, devices=tuple(arr.sharding.device_set))
    return out


@handler("copy_.default")
def copy_(args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(dst, XLATensor):
        with torch.no_grad():
            dst.copy_(to_cpu(src))
        return dst
    if isinstance(src, XLATensor):
        if device_groups.active and src.device != dst.device:
            src = _moved(src, dst.device)
        views.assign_result(dst, src)
        return dst
    aval = (tuple(src.shape), src.dtype)
    daval = dst._lazy.aval
    views.check_broadcast(daval[0], aval[0], "copy_")
    v = (upload_node(src), 0)
    if aval != daval:
        v = views.cast_to(v, aval, daval)
    views.assign(dst, v, fresh=True)
    return dst


@handler("_to_copy.default")
def _to_copy(args, kwargs):
    x = args[0]
    device = kwargs.get("device")
    check_index(device)
    dtype = kwargs.get("dtype") or x.dtype
    if device is not None and torch.device(device).type != "xla":
        out = to_cpu(x)
        if out.dtype != dtype:
            out = out.to(dtype)
        if kwargs.get("pin_memory"):
            out = out.pin_memory()
        return out
    if device_groups.active and device is not None and device_groups.resolve(device) != x.device.index:
        x = _moved(x, device_groups.xla_device(device_groups.resolve(device)))
    xaval = x._lazy.aval
    aval = (xaval[0], dtype)
    return new_base(views.cast_to(value_of(x), xaval, aval), aval)


def _moved(t, device):
    """t's value as a new tensor on another XLA device of this process: its buffer
    is computed on its own device, then copied device to device."""
    arr = device_array(t)
    t0 = time.perf_counter_ns()
    with profiling.region(profiling.TRANSFER_TO_DEVICE):
        moved = jax.device_put(arr, topology.device_for(device.index))
    metrics.metric("TransferToDeviceTime", time.perf_counter_ns() - t0)
    aval = t._lazy.aval
    return device_groups.on_device(device.index, new_base, (ir.data_node(moved, *aval), 0), aval)


@handler("_local_scalar_dense.default")
def _item(args, kwargs):
    t = args[0]
    if t.numel() != 1:
        raise RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to Scalar")
    metrics.counter("aten::_local_scalar_dense")
    return to_cpu(t).item()


@handler("is_nonzero.default")
def _is_nonzero(args, kwargs):
    t = args[0]
    if t.numel() != 1:
        # PyTorch's own message, without reading the tensor
        torch.is_nonzero(torch.empty(t.shape, dtype=t.dtype))
    metrics.counter("aten::_local_scalar_dense")
    return bool(to_cpu(t).item())


@handler("equal.default")
def _equal(args, kwargs):
    metrics.counter("aten::equal")
    return torch.equal(to_cpu(args[0]), to_cpu(args[1]))


@handler("detach.default", "alias.default", "lift_fresh.default")
def _detach(args, kwargs):
    x = args[0]
    out = views.alias(x)
    # the alias reads the same value, so it has the same layout: an SPMD annotation
    # goes with it (a gradient autograd detaches into x.grad keeps its sharding)
    if x._sharding is not None:
        out._sharding = x._sharding
    return out


@handler("detach_.default")
def _detach_(args, kwargs):
    return args[0]


@handler("resize_.default")
def _resize_(args, kwargs):
    return views.resize(args[0], args[1])


@handler("resize_as_.default")
def _resize_as_(args, kwargs):
    return views.resize(args[0], args[1].shape)


@handler("set_.source_Tensor")
def _set_tensor(args, kwargs):
    return views.alias_of(args[0], args[1])


@handler("set_.default")
def _set_empty(args, kwargs):
    return views.set_empty(args[0])


@handler("set_.source_Storage", "set_.source_Storage_storage_offset")
def _set_storage(args, kwargs):
    raise RuntimeError(
        "torch_xla: set_ with a Storage is not supported on XLA tensors (XLA tensors have no storage); "
        "use set_(tensor) or tensor.data = other")

