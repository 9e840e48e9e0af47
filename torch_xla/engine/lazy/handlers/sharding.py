"""Sharding annotations of XLA tensors (SPMD).

`annotate(t, sharding)` with a jax NamedSharding over the SPMD devices:
- device data is placed at once (`jax.device_put` to the sharding: each device
  keeps only its shard; no IR is recorded, so a loader thread may call it);
- a pending value (or a view) gets a `sharding_constraint` node, lowered to
  `jax.lax.with_sharding_constraint`, for XLA's partitioner.
The tensor remembers its annotation (`_sharding`) for the spec string and for
XLAShardedTensor; `clear(t)` forgets it and makes the value replicated again.
"""
import math
import weakref

import jax
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from ...base import events, frames
from ...base.dtypes import storage_array, torch_to_numpy
from ...ir import node as ir
from ...ir.graph import Graph
from ...ops.context import ctx
from ...ops.op import OpInfo
from ...ops.registry import handler
from ...runtime import topology
from .. import donation, host, padding, views
from ..dispatch import functional_handler
from ..tracing import op_info
from ..state import base_of, value_of, whole_base
from ..tensor import XLATensor, new_base
from ..tracing import trace_node, wrap
from ..transfers import device_array

_shard_map = getattr(jax, "shard_map", None)
if _shard_map is not None:
    _SHARD_MAP_KW = {"check_vma": False}
else:  # jax < 0.7
    from jax.experimental.shard_map import shard_map as _shard_map
    _SHARD_MAP_KW = {"check_rep": False}

# upstream's ShardingType numbers
REPLICATED, MAXIMAL, TUPLE, TILED, MANUAL, PARTIAL, UNKNOWN = range(7)


def _meta(x, *, sharding):
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _lowering(x, *, sharding):
    if ctx.mesh is not None:
        sharding = topology.on_mesh(sharding, ctx.mesh)
    return jax.lax.with_sharding_constraint(x, sharding)


_CONSTRAINT = OpInfo("sharding_constraint", None, _lowering, meta=_meta)


# -- manual sharding ------------------------------------------------------------
# A manual value is a global value of one shard's shape whose buffer differs on
# every device (declared replicated to the partitioner, so ops on it run per
# device with no communication). full_to_shard and shard_to_full move between
# the two views with an identity shard_map, which lowers to upstream's
# SPMDFullToShardShape / SPMDShardToFullShape custom calls.

def _identity_shard_map(x, mesh, in_spec, out_spec):
    return _shard_map(lambda v: v, mesh=mesh, in_specs=(in_spec,), out_specs=out_spec, **_SHARD_MAP_KW)(x)


def _to_shard_meta(x, *, sharding, local):
    return torch.empty(local, dtype=x.dtype, device="meta")


def _to_shard_lowering(x, *, sharding, local):
    return _identity_shard_map(x, sharding.mesh, sharding.spec, PartitionSpec())


def _to_full_meta(x, *, sharding, full, reduce=False):
    return torch.empty(full, dtype=x.dtype, device="meta")


def _replicated_axes(s):
    """The mesh axes mesh sharding s leaves out of its spec: along them every
    device holds the same shard."""
    used = set()
    for p in s.spec:
        if p is not None:
            used.update(p if isinstance(p, tuple) else (p,))
    return tuple(a for a in s.mesh.axis_names if a not in used)


def _to_full_lowering(x, *, sharding, full, reduce=False):
    if reduce:
        # a gradient leaving the region: each device's part is summed over the mesh
        # axes the sharding replicates over (every device there used the same value)
        axes = _replicated_axes(sharding)
        body = (lambda v: jax.lax.psum(v, axes)) if axes else (lambda v: v)
        y = _shard_map(body, mesh=sharding.mesh, in_specs=(PartitionSpec(),), out_specs=sharding.spec,
                       **_SHARD_MAP_KW)(x)
    else:
        y = _identity_shard_map(x, sharding.mesh, PartitionSpec(), sharding.spec)
    if tuple(y.shape) != tuple(full):   # the shards were padded: drop the padding
        y = jax.lax.slice(y, (0,) * len(full), tuple(full))
    return y


_TO_SHARD = OpInfo("spmd_full_to_shard", None, _to_shard_lowering, meta=_to_shard_meta)
_TO_FULL = OpInfo("spmd_shard_to_full", None, _to_full_lowering, meta=_to_full_meta)


def _named(s, what):
    if not hasattr(s, "mesh") or not hasattr(s, "spec"):
        raise RuntimeError(f"{what}: the sharding must be a mesh sharding (Mesh.get_op_sharding), got {s!r}")
    return s


def _check_spmd(what):
    if topology.mode() != topology.SPMD:
        raise RuntimeError(f"{what}: manual sharding needs SPMD mode (call xr.use_spmd() first)")


def full_to_shard(t):
    """upstream's _spmd_full_to_shard_shape: a new manual tensor holding, on
    each device, that device's shard of sharded tensor t."""
    what = "_spmd_full_to_shard_shape"
    _check_spmd(what)
    if getattr(t, "_manual", False):
        raise RuntimeError(f"{what}: the tensor is already manually sharded")
    s = current_sharding(t)
    if s is None:
        raise RuntimeError(f"{what}: the tensor of shape {list(t.shape)} has no sharding; "
                           "mark_sharding it first (enable_manual_sharding does both)")
    s = _named(s, what)
    try:
        local = tuple(s.shard_shape(tuple(t.shape)))
    except ValueError:
        raise RuntimeError(f"{what}: shape {list(t.shape)} does not divide evenly over the mesh "
                           f"as {s.spec}; manual regions need even shards") from None
    if t.requires_grad and torch.is_grad_enabled():
        return _ToShard.apply(t, s, local)
    return _to_shard(t, s, local)


def _to_shard(t, s, local):
    _watch_manual()
    out, e = trace_node(_TO_SHARD, (t,), {"sharding": s, "local": local})
    r = wrap(out, e)
    r._manual = True
    return r


def _to_full(t, s, full, reduce=False):
    kw = {"sharding": s, "full": full, "reduce": True} if reduce else {"sharding": s, "full": full}
    out, e = trace_node(_TO_FULL, (t,), kw)
    r = wrap(out, e)
    r._sharding = s
    return r


# A manual region is differentiable, as shard_map is in JAX: the gradient of
# leaving it (shards assembled) enters it again, split equally among the devices
# that hold the same shard; the gradient of entering it (each device's shard)
# leaves it with the parts of the devices holding the same shard summed.
class _ToShard(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, s, local):
        ctx.s, ctx.full = s, tuple(t.shape)
        return _to_shard(t.detach(), s, local)

    @staticmethod
    def backward(ctx, g):
        if not is_manual(g):
            g = wrap(*_as_manual(g, "backward of _spmd_full_to_shard_shape"))
        return _to_full(g, ctx.s, ctx.full, reduce=True), None, None


class _ToFull(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, s, full):
        ctx.s, ctx.local = s, tuple(t.shape)
        return _to_full(t.detach(), s, full)

    @staticmethod
    def backward(ctx, g):
        k = math.prod(ctx.s.mesh.shape[a] for a in _replicated_axes(ctx.s))
        return _to_shard(g / k if k > 1 else g, ctx.s, ctx.local), None, None


def is_manual(t):
    """Whether t is manually sharded: marked so, or computed from a manual value
    that no shard_to_full closed (ops do not carry the mark)."""
    if getattr(t, "_manual", False):
        return True
    v = value_of(t)
    return v[0].kind == ir.OP and bool(manual_roots(Graph.capture([v])))


def _as_manual(t, what):
    """(node, entry) of t's value seen as manual: each device's copy its own."""
    whole = whole_base(t)
    if _base_data(whole) is not None or (whole is not None and host.held(whole) is not None):
        raise RuntimeError(f"{what}: device data (shape {list(t.shape)}) cannot be marked manual; "
                           "use enable_manual_sharding, or mark the result of an op")
    s = current_sharding(t)
    if s is not None and not s.is_fully_replicated:
        raise RuntimeError(f"{what}: the tensor is sharded as {spec_string(t)}; "
                           "use _spmd_full_to_shard_shape (enable_manual_sharding) for sharded tensors")
    _watch_manual()
    return trace_node(_TO_SHARD, (t,), {"sharding": topology.replicated(), "local": tuple(t.shape)})


def mark_manual(t):
    """upstream's _mark_manual_sharding: from here on, each device's copy of
    pending value t is its own local value (t itself becomes manual)."""
    what = "_mark_manual_sharding"
    _check_spmd(what)
    if not is_manual(t):
        out, _ = _as_manual(t, what)
        views.assign(t, (out, 0))
        t._sharding = None
    t._manual = True
    return t


def shard_to_full(t, sharding, full_shape, mark=False):
    """upstream's _spmd_shard_to_full_shape: the global tensor of `full_shape`
    laid out as `sharding` whose shards are manual tensor t's per-device values.
    mark=True takes a tensor that is not manual as each device's own value
    first (what disable_manual_sharding does)."""
    what = "_spmd_shard_to_full_shape"
    _check_spmd(what)
    if not is_manual(t):
        if not mark:
            raise RuntimeError(f"{what}: the tensor is not manually sharded "
                               "(enable_manual_sharding / _mark_manual_sharding first)")
        t = wrap(*_as_manual(t, what))
    s = _named(sharding, what)
    full = tuple(int(d) for d in full_shape)
    tiles = _tiles(s, len(full))
    local = tuple(t.shape)
    if len(local) != len(full) or any(-(-f // k) != d for f, k, d in zip(full, tiles, local)):
        raise RuntimeError(f"{what}: shards of shape {list(local)} tiled {tiles} cannot make "
                           f"a tensor of shape {list(full)}")
    if t.requires_grad and torch.is_grad_enabled():
        return _ToFull.apply(t, s, full)
    return _to_full(t, s, full)


def manual_roots(graph):
    """Roots of `graph` computed from a manual value that no shard_to_full
    closed: XLA cannot hand those back (each device holds a different value)."""
    manual = set()
    for node in graph.order:   # operands before users
        name = node.entry.name
        if name == _TO_SHARD.name or (name != _TO_FULL.name
                                      and any(id(v[0]) in manual for v in node.operands)):
            manual.add(id(node))
    return [i for i, (node, _) in enumerate(graph.roots) if id(node) in manual]


def _refuse_manual_outputs(graph, **_):
    bad = manual_roots(graph)
    if bad:
        shapes = [list(graph.roots[i][0].entry.out_avals[graph.roots[i][1]][0]) for i in bad]
        raise RuntimeError(
            f"torch_xla: {len(bad)} manually sharded tensor(s) of shape {shapes} would be computed; "
            "each device holds a different value, so pass them through disable_manual_sharding "
            "(_spmd_shard_to_full_shape) before they are read or synced, or drop them")


def _watch_manual():
    events.subscribe("compile_begin", _refuse_manual_outputs)


def _base_data(b):
    """The data node behind Base b, or None when b is None, or its value pending, a
    scalar or still on the host (asking would upload it)."""
    if b is not None and b.value[0].kind == ir.DATA and not host.is_held(b.value[0]) \
            and b.value[0].data is not None:
        return b.value[0]
    return None


def _is_placeholder(b):
    """Whether Base b (or None) holds a placeholder: a data leaf with no data that
    no graph consumed (a donated buffer is no placeholder)."""
    if b is None or b.value[0].kind != ir.DATA or b.value[0].data is not None:
        return False
    return not donation.is_consumed(b.value[0])


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

    Under an uneven layout (a dimension that does not divide over its mesh axes)
    device data is held padded, each device keeping its padded shard
    (lazy/padding.py); a constrained value is computed padded alike."""
    whole = whole_base(t)
    kept = host.held(whole) if whole is not None else None
    node = _base_data(whole) if kept is None else None
    if kept is not None or node is not None:
        uneven = padding.padded_shape(whole.aval[0], sharding) is not None
        if kept is not None:   # still on the host: each device receives its (padded) shard from there
            if uneven:
                kept.host = padding.pad_host(kept.host, sharding)
            whole.placed(host.place(kept, sharding))
        else:
            whole.placed(padding.place(node.data, whole.aval[0], sharding))
        if uneven and remember is not None and t.requires_grad and t.is_leaf:
            _pad_gradients(t)
    elif _is_placeholder(whole) and isinstance(sharding, NamedSharding):
        # no data to move: the placeholder compiles as an input of that layout
        layout = sharding if is_even(sharding, whole.aval[0]) else topology.replicated()
        whole.placed(None, ir.placeholder_node(whole.aval[0], whole.aval[1], layout))
    else:
        out, _ = trace_node(_CONSTRAINT, (t,), {"sharding": sharding})
        views.assign(t, (out, 0))
    t._sharding = remember


def _pad_gradients(t):
    """A weight held padded at rest gets its gradient padded at rest too: its
    gradient is constrained to the weight's layout as autograd hands it over, so
    the barrier holds `.grad` in padded shards (lazy/padding.py) instead of a
    whole copy on every device. Once per tensor; the hook follows the layout the
    tensor has when backward runs."""
    if getattr(t, "_pads_gradients", False):
        return
    ref = weakref.ref(t)

    def hook(g):
        w = ref()
        s = getattr(w, "_sharding", None) if w is not None else None
        if (s is None or not isinstance(g, XLATensor) or tuple(g.shape) != tuple(w.shape)
                or padding.padded_shape(tuple(g.shape), s) is None):
            return None
        return constrained(g, s)

    t.register_hook(hook)
    t._pads_gradients = True


def annotate(t, sharding):
    """Lay t out as `sharding` (see the module docstring). Remembers the user's
    line, which the SPMD report names when the annotation costs an all-gather."""
    _place(t, sharding, sharding)
    t._sharding_site = frames.user_src(2)


def constrained(t, sharding):
    """A new tensor with t's value under a sharding constraint (t is unchanged)."""
    out, e = trace_node(_CONSTRAINT, (t,), {"sharding": sharding})
    r = wrap(out, e)
    r._sharding = sharding      # its spec, before and after the graph runs
    return r


def clear(t):
    """Forget t's annotation. Device data goes back to the one device unannotated
    data is uploaded to (a program that needs it elsewhere replicates it); a
    pending value is constrained to be replicated."""
    if getattr(t, "_sharding", None) is None and not _is_sharded_data(t):
        return
    if _base_data(whole_base(t)) is not None:
        _place(t, SingleDeviceSharding(topology.upload_device()), None)
    else:
        _place(t, topology.replicated(), None)


def _is_sharded_data(t):
    node = _base_data(whole_base(t))
    if node is None:
        return False
    s = getattr(node.data, "sharding", None)
    return s is not None and not s.is_fully_replicated


def current_sharding(t):
    """t's annotation, else the layout of its device data when that is sharded, else None."""
    s = getattr(t, "_sharding", None)
    if s is not None:
        return s
    node = _base_data(base_of(t))
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
    '{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}', '{manual}', '' when unsharded."""
    if getattr(t, "_manual", False):
        return "{manual}"
    s = current_sharding(t)
    if s is None:
        return "{replicated}" if _replicated_result(t) else ""
    return format_sharding(s, t.dim())


def _replicated_result(t):
    """Whether t holds, unannotated, a value the logical SPMD device computed: an
    output laid out replicated by XLA over every device, or of a program with no
    sharded input, which ran once on the first device but stands for the same
    value on each (upstream reports both `{replicated}`). Uploaded data is not."""
    node = _base_data(base_of(t))
    if node is None:
        return False
    s = getattr(node.data, "sharding", None)
    if s is None:
        return False
    return len(s.device_set) > 1 or getattr(node, "result", False)


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
    if getattr(t, "_manual", False):
        return MANUAL
    s = current_sharding(t)
    if s is None:
        return REPLICATED if _replicated_result(t) else None
    h = _hlo(s, t.dim())
    if h.is_replicated():
        return REPLICATED
    if h.is_manual():
        return MANUAL
    if h.is_maximal():
        return MAXIMAL
    return PARTIAL if h.replicate_on_last_tile_dim() else TILED


# clone (and so copy.deepcopy) of a sharded tensor is sharded alike, as upstream
# carries the spec to the copy: the copy's value gets the same constraint
_plain_clone = []


@handler("clone.default")
def _clone(args, kwargs):
    if not _plain_clone:
        _plain_clone.append(functional_handler(op_info(torch.ops.aten.clone.default)))
    out = _plain_clone[0](args, kwargs)
    x = args[0]
    if topology.mode() == topology.SPMD and isinstance(x, XLATensor):
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
    if s.is_fully_replicated:
        s = NamedSharding(s.mesh, PartitionSpec())
    # laid out from the host at once: the padded shards of an uneven layout too
    topology.lock()
    arr = padding.padded_host(storage_array(torch_to_numpy(host), dtype), s)
    t = new_base((ir.data_node(arr, want, dtype), 0), (want, dtype))
    annotate(t, s)
    return t


def padded_shards(t, s):
    """[(device, data, index slices)] of tensor t under an uneven layout `s`: each
    device's tile of t zero-padded to the even shard shape (upstream's padded
    shards), with the slices of t it covers (clipped to t's shape)."""
    shape = tuple(t.shape)
    padded = padding.padded_shape(shape, s) or shape
    whole = whole_base(t)
    node = _base_data(whole)
    held = node.data if node is not None else None
    if (held is not None and tuple(held.shape) == padded and held.sharding == s
            and held.is_fully_addressable):
        # held padded at rest (lazy/padding.py): each device's shard as it is
        by_dev = {sh.device: sh.data for sh in held.addressable_shards}
        piece = lambda dev, idx: np.asarray(by_dev[dev])   # noqa: E731
    else:
        big = padding.pad_host(np.asarray(topology.host_value(device_array(t))), s)   # the logical value, padded
        piece = lambda dev, idx: big[idx]   # noqa: E731
    where = s.devices_indices_map(padded)
    out = []
    for dev in topology.spmd_devices():
        idx = where[dev]
        clipped = [slice(min(sl.start or 0, d), min(sl.stop if sl.stop is not None else p, d), 1)
                   for sl, d, p in zip(idx, shape, padded)]
        out.append((dev, piece(dev, idx), clipped))
    return out
