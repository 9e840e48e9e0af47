"""Values kept on the host until the devices need them: the SPMD virtual device.

In SPMD mode `xla:0` is one logical device over every local device (upstream's
`SPMD:0`). A CPU tensor moved there (`t.to("xla")`, `torch.tensor(..., device=
"xla")`, a CPU fallback's result, a loaded batch) is not uploaded at once: the
tensor's value is a `HostNode`, a device-data leaf whose value is still a host
array (upstream's "Tensor on host"). It goes to the devices at the first of:

- `mark_sharding` (`place`): each device receives only its own shard, straight
  from the host. A model built on the CPU, moved to the device and sharded never
  lands whole on one device. Counted as upstream's `VirtualDeviceUsage`;
- its first use in IR (an op reads it, a view of it is taken): that reads the
  leaf's hash, which depends on where the data lies (a data leaf's hash includes
  its layout in SPMD mode), so the value is uploaded first, to where unsharded
  data goes (`topology.upload_device`);
- anything that needs its buffer (the leaf's `data`: a launch, a DLPack export);
- a full barrier (`upload_held`): upstream's sync moves every host-held tensor.

A host read (`.cpu()`, `.item()`, printing) copies the host array: nothing is
transferred. Only a HostNode's own `hash` and `data` are properties; every other
leaf is a plain `ir.Node`, so tracing pays nothing for this.

`transfer` is the one host-to-device copy of user data (every upload of
`transfers` goes through it): TransferToDeviceTime, TensorToData, OutboundData
(the bytes every device received), the profiler's region, the `transferred`
event.
"""
import threading
import time
import weakref

import jax
import numpy as np

from ..base import events, metrics, profiling
from ..base.dtypes import numpy_to_torch, storage_array, torch_to_numpy
from ..ir import node as ir
from ..runtime import topology

_HASH = ir.Node.hash     # the slots behind HostNode's properties
_DATA = ir.Node.data
_lock = threading.Lock()
_held = []               # weakrefs to HostNodes made since the last full barrier


def transfer(arr, dest, shape, dtype):
    """Host array `arr` (device storage type) on `dest`: a jax device, or a
    sharding (each device gets its part straight from the host)."""
    t0 = time.perf_counter_ns()
    topology.lock()
    with profiling.region(profiling.TRANSFER_TO_DEVICE):
        if isinstance(dest, jax.Device):
            out = jax.device_put(arr, dest)
        else:
            out = topology.lay_out(arr, dest)
    took = time.perf_counter_ns() - t0
    sent = arr.nbytes if isinstance(dest, jax.Device) else sum(s.data.nbytes for s in out.addressable_shards)
    metrics.metric("TransferToDeviceTime", took)
    metrics.metric("TensorToData", took)   # upstream: a CPU tensor made device data
    metrics.metric("OutboundData", sent, kind="bytes")
    if events.wanted("transferred"):
        events.emit("transferred", direction="to_device", shape=tuple(shape), dtype=dtype, nbytes=sent,
                    devices=(dest,) if isinstance(dest, jax.Device) else tuple(out.sharding.device_set))
    return out


def host_array(cpu):
    """A copy of CPU tensor `cpu` in its device storage type (the caller may
    change `cpu` afterwards)."""
    arr = storage_array(torch_to_numpy(cpu), cpu.dtype)
    return np.array(arr, copy=True)


class HostNode(ir.Node):
    """A device-data leaf whose value is still on the host (`host`, a numpy
    array in the device storage type); None once it was uploaded, when the node
    is an ordinary data leaf of that buffer."""
    __slots__ = ("host",)

    def __init__(self, host, shape, dtype):
        self.host = host
        ir.Node.__init__(self, ir.DATA, (shape, dtype), (), None)

    def _hash(self):
        if self.host is not None:
            self.upload()
        return _HASH.__get__(self)

    def _data(self):
        if self.host is not None:
            self.upload()
        return _DATA.__get__(self)

    hash = property(_hash, _HASH.__set__)
    data = property(_data, _DATA.__set__)

    def upload(self, layout=None):
        """Move the value to the devices: laid out as `layout` (a sharding), by
        default where unsharded data goes. -> the jax.Array."""
        with _lock:
            host = self.host
            if host is None:      # another thread was first
                return _DATA.__get__(self)
            shape, dtype = self.entry
            arr = transfer(host, topology.upload_device() if layout is None else layout, shape, dtype)
            _DATA.__set__(self, arr)
            _HASH.__set__(self, ir.data_node(arr, shape, dtype).hash)
            self.host = None
            return arr


def hold(cpu):
    """A leaf holding CPU tensor `cpu`'s value on the host (copied)."""
    topology.lock()
    node = HostNode(host_array(cpu), tuple(cpu.shape), cpu.dtype)
    if len(_held) > 4096:
        _held[:] = [r for r in _held if (n := r()) is not None and n.host is not None]
    _held.append(weakref.ref(node))
    return node


def held(base):
    """The HostNode holding Base `base`'s value while it is on the host, else None."""
    node = base.value[0]
    return node if type(node) is HostNode and node.host is not None else None


def is_held(node):
    return type(node) is HostNode and node.host is not None


def was_held(node):
    """Whether `node` is a leaf that was held on the host and uploaded for its
    first use in IR (upstream's tensor then reads an `xla::device_data` IR value)."""
    return type(node) is HostNode and node.host is None


def read(node):
    """The host-held value of `node` as a new CPU tensor (no transfer)."""
    return numpy_to_torch(node.host, node.entry[1])


def place(node, sharding):
    """Upload host-held `node` laid out as `sharding`: every device receives
    only its shard (upstream's VirtualDeviceUsage). -> the jax.Array."""
    metrics.counter("VirtualDeviceUsage")
    return node.upload(sharding)


def upload_held():
    """At a full barrier: every tensor still held on the host goes to the device
    (upstream's sync uploads them)."""
    if not _held:
        return
    refs = _held[:]
    del _held[:len(refs)]    # a loader thread may have added one meanwhile
    for r in refs:
        node = r()
        if node is not None and node.host is not None:
            node.upload()
