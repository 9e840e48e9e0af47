"""Padded shards at rest: device data under an uneven layout (SPMD).

A jax.Array holds even shards only, and a dimension that does not divide over
its mesh axes (a vocabulary of 50,257 rows over 4 devices) would otherwise
keep its whole value on every device. Such device data is held as an array of
the PADDED global shape (each sharded dim rounded up to a multiple of its
tiles, zeros at the end) laid out evenly, so each device holds only its padded
shard, as upstream's runtime holds it. The data leaf keeps the tensor's
logical (shape, dtype): an array larger than its leaf's shape is padded data.

This module makes the choice, in one place:
- `place(arr, shape, sharding)`: device data laid out as `sharding`, padded
  when uneven (mark_sharding, MpDeviceLoader, checkpoint loads, clear_sharding);
- graphs read padded data through a slice to the logical shape
  (`ir.graph.Graph.build_fn`: an input larger than its leaf's aval);
- `at_rest(base)`: the value a barrier computes for a Base, padded and laid
  out again when its data was padded before the step wrote it (a weight
  updated in place), or when it is a pending value under an uneven sharding
  constraint. XLA's partitioner slices and pads a sharded dim at its end
  locally, with no communication, so a training step keeps its weights
  padded at rest;
- readers outside graphs (`.cpu()`, local shards, DLPack, `_XLAC`) see the
  logical value (`logical`, `host_logical`).
"""
import jax
import numpy as np
import torch

from ..ir import node as ir
from ..ops.context import ctx
from ..ops.op import OpInfo
from ..runtime import topology
from ..runtime.topology import _spmd
from .tracing import ValueArg, trace_node

def _tiles(sharding, ndim):
    """How many pieces `sharding` cuts each of `ndim` dims into (None: one device
    or replicated)."""
    if sharding is None or not hasattr(sharding, "_to_xla_hlo_sharding"):
        return None
    h = sharding._to_xla_hlo_sharding(ndim)
    if h.is_replicated() or h.is_maximal() or h.is_manual():
        return None
    return tuple(h.tile_assignment_dimensions())[:ndim]


_padded_memo = {}


def padded_shape(shape, sharding):
    """The padded global shape that holds `shape` under `sharding` in even shards,
    or None when every dim divides (no padding needed)."""
    key = (tuple(shape), sharding)
    try:
        return _padded_memo[key]
    except KeyError:
        pass
    except TypeError:   # an unhashable sharding
        key = None
    tiles = _tiles(sharding, len(shape))
    out = None
    if tiles is not None and any(d % k for d, k in zip(shape, tiles)):
        out = tuple(-(-d // k) * k for d, k in zip(shape, tiles))
    if key is not None:
        if len(_padded_memo) > 4096:
            _padded_memo.clear()
        _padded_memo[key] = out
    return out


def is_padded(arr, shape):
    """Whether device array `arr` holds a value of logical `shape` with padding."""
    return arr is not None and tuple(arr.shape) != tuple(shape)


def _slices(shape):
    return tuple(slice(0, d) for d in shape)


def logical(arr, shape):
    """`arr` without its padding (a device array of `shape`; laid out by XLA)."""
    if not is_padded(arr, shape):
        return arr
    return jax.lax.slice(arr, (0,) * len(shape), tuple(shape))


def host_logical(arr, shape):
    """A numpy copy of the logical value of device array `arr`."""
    host = topology.host_value(arr)
    return np.ascontiguousarray(host[_slices(shape)]) if is_padded(arr, shape) else host


def place(arr, shape, sharding):
    """Device data `arr` (of logical `shape`, padded or not) laid out as
    `sharding`: evenly where every dim divides, else padded with zeros at the
    end of each uneven dim and each device holding its padded shard."""
    padded = padded_shape(shape, sharding)
    if padded is None:
        return topology.lay_out(logical(arr, shape), sharding)
    if tuple(arr.shape) == padded and getattr(arr, "sharding", None) == sharding:
        return arr
    return padded_host(host_logical(arr, shape), sharding)


def pad_host(host, sharding):
    """Host value `host` zero-padded at the end of each dim `sharding` cuts
    unevenly (unchanged where every dim divides)."""
    padded = padded_shape(host.shape, sharding)
    if padded is None:
        return host
    big = np.zeros(padded, dtype=host.dtype)
    big[_slices(host.shape)] = host
    return big


def padded_host(host, sharding):
    """Host value `host` laid out as `sharding` (padded when uneven)."""
    return topology.lay_out(pad_host(host, sharding), sharding)


# -- writing back padded ----------------------------------------------------------

def _rest_meta(x, *, shape, sharding):
    return torch.empty(shape, dtype=x.dtype, device="meta")


def _rest_lowering(x, *, shape, sharding):
    if ctx.mesh is not None:
        sharding = topology.on_mesh(sharding, ctx.mesh)
    widths = [(0, p - d, 0) for p, d in zip(shape, x.shape)]
    y = jax.lax.pad(x, np.zeros((), dtype=x.dtype), widths)
    return jax.lax.with_sharding_constraint(y, sharding)


_REST = OpInfo("pad_at_rest", None, _rest_lowering, meta=_rest_meta)


def _rest_layout(b):
    """(padded shape, sharding) Base b's next value is to be held in, or None."""
    v = b.value
    node = v[0]
    if node.kind != ir.OP:
        return None
    if node.entry.name == "sharding_constraint":
        s = node.entry.kwtemplate["sharding"]
        padded = padded_shape(b.aval[0], s)
        if padded is not None:
            return padded, s
    prev = b.prev_data
    if prev is not None:
        arr = prev.data
        if arr is not None and prev.entry == b.aval and is_padded(arr, b.aval[0]):
            return tuple(arr.shape), arr.sharding
    return None


def at_rest(b):
    """The root value a barrier computes for pending Base b: b.value, or b.value
    padded and laid out again when b is held padded at rest (see the module
    docstring). Its output is b's new data (b.aval stays the logical one)."""
    if not _spmd[0]:
        return b.value
    layout = _rest_layout(b)
    if layout is None:
        return b.value
    node, _ = trace_node(_REST, (ValueArg(b.value, b.aval),), {"shape": layout[0], "sharding": layout[1]})
    return (node, 0)


def roots(bases, values):
    """The root values a barrier computes for `bases` (whose values are `values`)."""
    if not _spmd[0]:
        return values
    return [at_rest(b) for b in bases]


def wants_rest(b):
    """Whether pending Base b is computed padded (a host read then syncs it
    through a barrier rather than computing its logical value alone)."""
    return _spmd[0] and _rest_layout(b) is not None
