"""SPMDSavePlanner / SPMDLoadPlanner: torch.distributed.checkpoint planners for
state dicts holding sharded XLA tensors.

Saving writes each distinct shard of a sharded tensor as its own chunk (no
device gathers the whole tensor); other tensors are written whole, from the
host. Loading reads, for every local shard of a sharded target, the stored
chunks that overlap it into a host buffer and, once the tensor's last piece has
arrived, places it on the devices with the target's own sharding. So a
checkpoint saved on one mesh loads on another mesh, or on one device.
"""
import dataclasses

import torch
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner, DefaultSavePlanner, create_default_local_load_plan, create_default_local_save_plan)
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata, MetadataIndex, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import SavePlan, LoadPlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from torch_xla.engine import api as _api

from ._helpers import _CpuShards, _is_sharded_tensor, _shard_entries

__all__ = ["SPMDSavePlanner", "SPMDLoadPlanner"]


def _flatten(state_dict):
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    return flatten_state_dict(state_dict)


def _split(flat):
    sharded, unsharded = {}, {}
    for k, v in flat.items():
        (sharded if isinstance(v, _CpuShards) or _is_sharded_tensor(v) else unsharded)[k] = v
    return sharded, unsharded


class SPMDSavePlanner(DefaultSavePlanner):
    """Plans one WriteItem per distinct shard of every sharded XLA tensor (or
    _CpuShards) and the default items for everything else."""

    def __init__(self):
        super().__init__(flatten_state_dict=True, flatten_sharded_tensors=False)
        self.sharded_state_dict = {}
        self.unsharded_state_dict = {}
        self._entries = {}

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        flat, self.mappings = _flatten(state_dict)
        self.state_dict = flat
        self.sharded_state_dict, self.unsharded_state_dict = _split(flat)
        self.is_coordinator = is_coordinator
        self._entries = {}

    def _shards_of(self, fqn):
        """{offsets: (position in local_shards, sizes, shard)}: the global plan renumbers
        MetadataIndex.index, so a shard is found again by its offsets."""
        if fqn not in self._entries:
            self._entries[fqn] = {tuple(off): (i, size, s) for i, off, size, s in
                                  _shard_entries(self.sharded_state_dict[fqn])}
        return self._entries[fqn]

    def create_local_plan(self) -> SavePlan:
        plan = create_default_local_save_plan(self.unsharded_state_dict, self.is_coordinator)
        items = list(plan.items)
        for fqn, value in self.sharded_state_dict.items():
            shape = value.global_shape if isinstance(value, _CpuShards) else value.shape
            dtype = value.shards[0].data.dtype if isinstance(value, _CpuShards) else value.dtype
            for off, (i, size, _) in self._shards_of(fqn).items():
                items.append(WriteItem(
                    index=MetadataIndex(fqn, torch.Size(off), i), type=WriteItemType.SHARD,
                    tensor_data=TensorWriteData(
                        chunk=ChunkStorageMetadata(offsets=torch.Size(off), sizes=torch.Size(size)),
                        properties=TensorProperties(dtype=dtype), size=torch.Size(shape))))
        plan = SavePlan(items, planner_data=self.mappings)
        self.plan = plan
        return plan

    def resolve_data(self, write_item):
        fqn = write_item.index.fqn
        if fqn in self.sharded_state_dict:
            _, size, shard = self._shards_of(fqn)[tuple(write_item.index.offset)]
            return shard.data[tuple(slice(0, n) for n in size)].contiguous()
        obj = self.lookup_object(write_item.index)
        if isinstance(obj, torch.Tensor) and obj.device.type == "xla":
            obj = obj.detach().cpu()
        return self.transform_object(write_item, obj)


class SPMDLoadPlanner(DefaultLoadPlanner):
    """Reads each local shard of a sharded XLA target from the overlapping stored
    chunks; the default planner's items for everything else."""

    def __init__(self):
        super().__init__(flatten_state_dict=True, flatten_sharded_tensors=False)
        self.sharded_state_dict = {}
        self.unsharded_state_dict = {}

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        self.original_state_dict = state_dict
        flat, self.mappings = _flatten(state_dict)
        for k, v in flat.items():
            if isinstance(v, _CpuShards):
                raise ValueError(f"SPMDLoadPlanner: {k} is a _CpuShards; load into the state dict of the model "
                                 "(its XLA tensors), not into a _sharded_cpu_state_dict")
        self.state_dict = flat
        self.sharded_state_dict, self.unsharded_state_dict = _split(flat)
        self.metadata = metadata
        self.is_coordinator = is_coordinator
        self._pending = {}

    def create_local_plan(self) -> LoadPlan:
        plan = create_default_local_load_plan(self.unsharded_state_dict, self.metadata,
                                              not self.allow_partial_load)
        items = list(plan.items)
        self._pending = {}
        for fqn, t in self.sharded_state_dict.items():
            md = self.metadata.state_dict_metadata.get(fqn)
            if not isinstance(md, TensorStorageMetadata):
                raise RuntimeError(f"SPMDLoadPlanner: the checkpoint has no tensor {fqn}")
            if tuple(md.size) != tuple(t.shape):
                raise ValueError(f"SPMDLoadPlanner: {fqn} is {tuple(md.size)} in the checkpoint but "
                                 f"{tuple(t.shape)} here")
            entries = _shard_entries(t)
            chunks = [ChunkStorageMetadata(offsets=torch.Size(off), sizes=torch.Size(size))
                      for _, off, size, _ in entries]
            reads = create_read_items_for_chunk_list(fqn, md, chunks)
            # the chunk list's position -> the shard's position in local_shards
            boxes = [(off, size) for _, off, size, _ in entries]
            fixed = []
            for r in reads:
                pos = r.dest_index.index
                fixed.append(dataclasses.replace(
                    r, dest_index=MetadataIndex(fqn, r.dest_index.offset, entries[pos][0])))
            items.extend(fixed)
            self._pending[fqn] = {"left": len(fixed), "buffer": torch.empty(tuple(t.shape), dtype=t.dtype),
                                  "boxes": {entries[p][0]: boxes[p] for p in range(len(entries))}}
        return LoadPlan(items)

    def resolve_tensor(self, read_item):
        fqn = read_item.dest_index.fqn
        if fqn not in self.sharded_state_dict:
            return super().resolve_tensor(read_item)
        st = self._pending[fqn]
        off, size = st["boxes"][read_item.dest_index.index]
        region = st["buffer"][tuple(slice(o, o + n) for o, n in zip(off, size))]
        return region[tuple(slice(o, o + n) for o, n in zip(read_item.dest_offsets, read_item.lengths))]

    def commit_tensor(self, read_item, tensor):
        fqn = read_item.dest_index.fqn
        if fqn not in self.sharded_state_dict:
            return super().commit_tensor(read_item, tensor)
        st = self._pending[fqn]
        st["left"] -= 1
        if st["left"] == 0:
            _place_like(self.sharded_state_dict[fqn], st.pop("buffer"))


def _place_like(target, host):
    """Write `host` into the XLA tensor `target`, keeping its sharding."""
    from torch_xla.distributed.spmd import XLAShardedTensor
    if isinstance(target, XLAShardedTensor):
        target = target.global_tensor
    sharding = _api.current_sharding(target)
    with torch.no_grad():
        target.copy_(host)
    if sharding is not None:
        _api.mark_sharding(target, sharding)
