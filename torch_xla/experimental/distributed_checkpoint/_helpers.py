"""Shard bookkeeping shared by the SPMD checkpoint planners.

A sharded XLA tensor is described to torch.distributed.checkpoint shard by
shard: each distinct shard (replica 0 of it) becomes one chunk with its offsets
and unpadded sizes in the global tensor. `_CpuShards` holds such shards already
copied to the host (`_sharded_cpu_state_dict`), so a checkpoint can be written
while training goes on.
"""
import dataclasses
from typing import Any, List

import torch

import torch_xla
from torch_xla.engine import api as _api

__all__ = ["_CpuShards", "_sharded_cpu_state_dict", "_is_sharded_tensor"]


@dataclasses.dataclass
class _CpuShards:
    """The host copies of a sharded tensor's local shards (XLAShard objects with CPU
    data) and the tensor's global shape."""
    shards: List[Any]
    global_shape: torch.Size


def _is_sharded_tensor(x) -> bool:
    """True for an XLA tensor laid out over several devices (not replicated)."""
    from torch_xla.distributed.spmd import XLAShardedTensor
    if isinstance(x, XLAShardedTensor):
        x = x.global_tensor
    if not isinstance(x, torch.Tensor) or x.device.type != "xla":
        return False
    kind = _api.sharding_type(x)
    return kind is not None and kind != 0   # 0: REPLICATED


def _local_shards(t):
    import torch_xla.distributed.spmd as xs
    return xs.wrap_if_sharded(t).local_shards


def _shard_box(shard, global_shape):
    """(offsets, sizes) of an XLAShard in the global tensor (sizes without padding)."""
    if shard.indices is Ellipsis:
        return [0] * len(global_shape), list(global_shape)
    offsets = [s.start for s in shard.indices]
    sizes = [max(0, min(s.stop, dim) - s.start) for s, dim in zip(shard.indices, global_shape)]
    return offsets, sizes


def _shard_entries(value):
    """[(index in local_shards, offsets, sizes, shard)] of the distinct local shards of
    a sharded XLA tensor or a _CpuShards (replicas after the first are left out: they
    hold the same elements)."""
    if isinstance(value, _CpuShards):
        shards, shape = value.shards, list(value.global_shape)
    else:
        shards, shape = _local_shards(value), list(value.shape)
    out = []
    for i, s in enumerate(shards):
        if getattr(s, "replica_id", 0) != 0:
            continue
        offsets, sizes = _shard_box(s, shape)
        if all(n > 0 for n in sizes):
            out.append((i, offsets, sizes, s))
    return out


def _sharded_cpu_state_dict(state_dict):
    """The same nesting, with every sharded XLA tensor replaced by its _CpuShards and
    every other XLA tensor copied to the host."""
    if isinstance(state_dict, dict):
        return type(state_dict)((k, _sharded_cpu_state_dict(v)) for k, v in state_dict.items())
    if isinstance(state_dict, (list, tuple)):
        return type(state_dict)(_sharded_cpu_state_dict(v) for v in state_dict)
    if _is_sharded_tensor(state_dict):
        return _CpuShards(shards=_local_shards(state_dict), global_shape=state_dict.shape)
    if isinstance(state_dict, torch.Tensor) and state_dict.device.type == "xla":
        return state_dict.cpu()
    return state_dict


def _device():
    return torch_xla.device()
