"""Sharding annotations of XLA tensors (SPMD).

`annotate(t, sharding)` with a jax NamedSharding over the SPMD devices:
- device data is placed at once (`jax.device_put` to the sharding: each device
  keeps only its shard; no IR is recorded, so a loader thread may call it);
- a pending value (or a view) gets a `sharding_constraint` node, lowered to
  `jax.lax.with_sharding_constraint`, for XLA's partitioner.
The tensor remembers its annotation (`_sharding`) for the spec string and for
XLAShardedTensor; `clear(t)` forgets it and makes the value replicated again.
"""
import torch

from ...base import frames
from ...ir import node as ir
from ...ops.op import OpInfo
from ...ops.registry import handler
from ...runtime import topology
from .. import views
from ..tracing import trace_node, wrap

# upstream's ShardingType numbers
REPLICATED, MAXIMAL, TUPLE, TILED, MANUAL, PARTIAL, UNKNOWN = range(7)


def _meta(x, *, sharding):
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _lowering(x, *, sharding):
    import jax
    return jax.lax.with_sharding_constraint(x, sharding)


_CONSTRAINT = OpInfo("sharding_constraint", None, _lowering, meta=_meta)


def _base_data(t):
    """The data node behind base tensor t, or None when its value is pending or a scalar."""
    if t._xb is None and t._v[0].kind == ir.DATA and t._v[0].data is not None:
        return t._v[0]
    return None


def _whole(t):
    """t's base when t is an alias of all of it (a Parameter made by nn.Module.to
    is one), else t."""
    if t._xb is not None and not t._chain and t._aval == t._xb._aval:
        return t._xb
    return t


def is_even(sharding, shape):
    """Whether every dimension of `shape` divides over its share of the mesh."""
    try:
        sharding.shard_shape(tuple(shape))
        return True
    except ValueError:
        return False


def _place(t, sharding, remember):
    """Device data: move its shards to `sharding` now; a pending value: constrain it.
    `remember` is the annotation kept on the tensors (None after clear).

    An uneven layout (a dimension that does not divide over its mesh axes) can
    constrain values inside a graph, where XLA pads the shards, but a jax.Array
    cannot hold padded shards: such device data is kept whole on every device,
    and the tensor remembers the annotation for its spec string and shards."""
    whole = _whole(t)
    node = _base_data(whole)
    if node is not None:
        layout = sharding if is_even(sharding, whole._aval[0]) else topology.replicated()
        arr = topology.lay_out(node.data, layout)
        views.assign(whole, (ir.data_node(arr, *whole._aval), 0), fresh=True)
        whole._last_data = None
        whole._sharding = remember
    else:
        out, _ = trace_node(_CONSTRAINT, (t,), {"sharding": sharding})
        views.assign(t, (out, 0))
    t._sharding = remember


def annotate(t, sharding):
    """Lay t out as `sharding` (see the module docstring). Remembers the user's
    line, which the SPMD report names when the annotation costs an all-gather."""
    _place(t, sharding, sharding)
    t._sharding_site = _whole(t)._sharding_site = frames.user_src(2)


def constrained(t, sharding):
    """A new tensor with t's value under a sharding constraint (t is unchanged)."""
    out, e = trace_node(_CONSTRAINT, (t,), {"sharding": sharding})
    return wrap(out, e)


def clear(t):
    """Forget t's annotation; its value becomes replicated on every device."""
    if getattr(t, "_sharding", None) is None and not _is_sharded_data(t):
        return
    _place(t, topology.replicated(), None)


def _is_sharded_data(t):
    node = _base_data(_whole(t))
    if node is None:
        return False
    s = getattr(node.data, "sharding", None)
    return s is not None and not s.is_fully_replicated


def current_sharding(t):
    """t's annotation, else the layout of its device data when that is sharded, else None."""
    s = getattr(t, "_sharding", None)
    if s is not None:
        return s
    base = t if t._xb is None else t._xb
    node = _base_data(base)
    if node is None:
        return None
    s = getattr(node.data, "sharding", None)
    if s is None or len(s.device_set) == 1 or s.is_fully_replicated:
        return None
    return s


def _hlo(sharding, ndim):
    return sharding._to_xla_hlo_sharding(ndim)


def spec_string(t):
    """Upstream's sharding text for t: '{devices=[4,1]0,1,2,3}', '{replicated}',
    '{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}', '' when unsharded."""
    s = current_sharding(t)
    if s is None:
        return ""
    return format_sharding(s, t.dim())


def _ordinal(device):
    """A device's place in the logical SPMD device (upstream prints these global
    ordinals; JAX's ids of another host's devices start at 2048 x host)."""
    order = {d: i for i, d in enumerate(topology.spmd_devices())}
    return order.get(device, device.id)


def format_sharding(s, ndim):
    h = _hlo(s, ndim)
    if h.is_replicated():
        return "{replicated}"
    if h.is_manual():
        return "{manual}"
    if h.is_maximal():
        devs = s._device_assignment
        return "{maximal device=%d}" % _ordinal(devs[h.tile_assignment_devices()[0]])
    devs = s._device_assignment
    dims = ",".join(str(d) for d in h.tile_assignment_dimensions())
    ids = ",".join(str(_ordinal(devs[i])) for i in h.tile_assignment_devices())
    suffix = " last_tile_dim_replicate" if h.replicate_on_last_tile_dim() else ""
    return "{devices=[%s]%s%s}" % (dims, ids, suffix)


def sharding_type(t):
    """Upstream's ShardingType number of t's sharding, or None when unsharded."""
    s = current_sharding(t)
    if s is None:
        return None
    h = _hlo(s, t.dim())
    if h.is_replicated():
        return REPLICATED
    if h.is_manual():
        return MANUAL
    if h.is_maximal():
        return MAXIMAL
    return PARTIAL if h.replicate_on_last_tile_dim() else TILED


def device_array(t):
    """The jax.Array holding t's value (runs its pending graph)."""
    from ..transfers import device_array as _da
    return _da(t)


# clone (and so copy.deepcopy) of a sharded tensor is sharded alike, as upstream
# carries the spec to the copy: the copy's value gets the same constraint
_plain_clone = []


@handler("clone.default")
def _clone(args, kwargs):
    if not _plain_clone:
        from ..dispatch import _functional_handler, op_info
        _plain_clone.append(_functional_handler(op_info(torch.ops.aten.clone.default)))
    out = _plain_clone[0](args, kwargs)
    x = args[0]
    if topology.mode() == topology.SPMD and hasattr(x, "_xb"):
        s = current_sharding(x)
        if s is not None:
            annotate(out, s)
    return out


def _tiles(s, ndim):
    """How many pieces `s` cuts each of `ndim` dims into."""
    if s.is_fully_replicated:
        return [1] * ndim
    return list(_hlo(s, ndim).tile_assignment_dimensions())[:ndim]


def from_cpu_shards(shards, s, ndim, global_shape=None):
    """A device tensor assembled from one CPU shard per SPMD device (in global
    ordinal order) laid out as jax sharding `s` over `ndim` dims; `global_shape`
    may drop trailing padding (each dim must still need every shard along it)."""
    import numpy as np
    from ..transfers import upload_array
    from ..tensor import new_base
    devs = topology.spmd_devices()
    shards = list(shards)
    if len(shards) != len(devs):
        raise RuntimeError(f"_global_tensor_from_cpu_shards: {len(shards)} shards for {len(devs)} devices")
    shape = tuple(shards[0].shape)
    if s.is_fully_replicated:   # a replicated layout has no dims of its own
        ndim = len(shape)
    if len(shape) != ndim or any(tuple(x.shape) != shape for x in shards):
        raise RuntimeError(f"_global_tensor_from_cpu_shards: every shard must have the same shape of rank {ndim}, "
                           f"got {[list(x.shape) for x in shards]}")
    tiles = _tiles(s, ndim)
    padded = tuple(d * t for d, t in zip(shape, tiles))
    want = padded if global_shape is None else tuple(int(d) for d in global_shape)
    if len(want) != ndim or any(-(-g // t) != d for g, t, d in zip(want, tiles, shape)):
        raise RuntimeError(f"_global_tensor_from_cpu_shards: shards of shape {list(shape)} tiled {tiles} "
                           f"cannot make a tensor of shape {list(want)}")
    dtype = shards[0].dtype
    full = np.empty(padded, dtype=shards[0].numpy().dtype)
    where = s.devices_indices_map(padded)
    for dev, x in zip(devs, shards):
        full[where[dev]] = x.numpy()
    host = torch.from_numpy(np.ascontiguousarray(full[tuple(slice(0, g) for g in want)]))
    arr = upload_array(host)
    t = new_base((ir.data_node(arr, want, dtype), 0), (want, dtype))
    if s.is_fully_replicated:
        from jax.sharding import NamedSharding, PartitionSpec
        annotate(t, NamedSharding(s.mesh, PartitionSpec()))
    elif all(g % k == 0 for g, k in zip(want, tiles)):   # JAX holds even shards only
        annotate(t, s)
    return t


def padded_shards(t, s):
    """[(device, data, index slices)] of tensor t under an uneven layout `s`: each
    device's tile of t zero-padded to the even shard shape (upstream's padded
    shards), with the slices of t it covers (clipped to t's shape)."""
    import numpy as np
    from ..transfers import device_array
    full = np.asarray(topology.host_value(device_array(t)))
    tiles = _tiles(s, full.ndim)
    padded = tuple(-(-d // k) * k for d, k in zip(full.shape, tiles))
    big = np.zeros(padded, dtype=full.dtype)
    big[tuple(slice(0, d) for d in full.shape)] = full
    where = s.devices_indices_map(padded)
    out = []
    for dev in topology.spmd_devices():
        idx = where[dev]
        clipped = [slice(min(sl.start or 0, d), min(sl.stop if sl.stop is not None else p, d), 1)
                   for sl, d, p in zip(idx, full.shape, padded)]
        out.append((dev, big[idx], clipped))
    return out
