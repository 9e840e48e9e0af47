"""XLAShardedTensor: an XLA tensor seen with its sharding.

It wraps the global XLA tensor (`global_tensor`); ops on it run on the global
tensor and wrap their results again. `local_shards` reads each device's shard
(from the JAX array's addressable shards), `sharding_spec` is upstream's text.
"""
import dataclasses

import torch

from torch_xla.engine import api as _api


@dataclasses.dataclass
class XLAShard:
    """One device's shard: `data` (a CPU tensor), `indices` (its slices of the
    global tensor), `shard_device` ('xla:<id>'), `replica_id`."""
    data: torch.Tensor
    indices: object
    shard_device: str
    replica_id: int

    @property
    def unpadded_data(self):
        if self.indices is Ellipsis:
            return self.data
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]


class XLAShardedTensor(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem, mesh_shape=None, partition_spec=None, *args, **kwargs):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=kwargs.get("requires_grad", elem.requires_grad))
        r.global_tensor = elem
        r.mesh_shape = mesh_shape
        r.partition_spec = partition_spec
        return r

    @property
    def local_shards(self):
        """Each device's shard, in device order (CPU tensors); under an uneven
        layout each is zero-padded to the common shard shape."""
        s = _api.current_sharding(self.global_tensor)
        if s is not None and not _api.is_even_sharding(s, tuple(self.global_tensor.shape)):
            return [XLAShard(_to_torch(data, self.global_tensor.dtype), idx, f"xla:{k}", 0)
                    for k, (_, data, idx) in enumerate(_api.padded_shards(self.global_tensor, s))]
        arr = _api.device_array(self.global_tensor)
        out = []
        for s in sorted(arr.addressable_shards, key=lambda s: s.device.id):
            data = _to_torch(s.data, self.global_tensor.dtype)
            idx = s.index
            indices = Ellipsis if all(sl == slice(None) for sl in idx) else [
                slice(sl.start or 0, sl.stop if sl.stop is not None else dim, 1)
                for sl, dim in zip(idx, self.global_tensor.shape)]
            out.append(XLAShard(data, indices, f"xla:{s.device.id}", s.replica_id))
        return out

    def load_local_shards_(self, shards):
        """Replace this tensor's value with `shards` (XLAShards, one per device, as
        `local_shards` returns them, each of its shard's shape); in place."""
        s = _api.current_sharding(self.global_tensor)
        if s is None or s.is_fully_replicated:
            raise RuntimeError("load_local_shards_: the tensor is not sharded (replicated shards cannot be loaded)")
        current = self.local_shards
        if len(shards) != len(current):
            raise RuntimeError(f"load_local_shards_: {len(shards)} shards given, the tensor has {len(current)}")
        by_device = {sh.shard_device: sh for sh in shards}
        ordered = []
        for cur in current:
            sh = by_device.get(cur.shard_device)
            if sh is None or tuple(sh.data.shape) != tuple(cur.data.shape):
                raise RuntimeError(f"load_local_shards_: no shard of shape {list(cur.data.shape)} "
                                   f"for {cur.shard_device}")
            ordered.append(sh.data.to(self.global_tensor.dtype))
        new = _api.from_cpu_shards(ordered, s, self.global_tensor.dim(), tuple(self.global_tensor.shape))
        _api.assign(self.global_tensor, new)

    @property
    def sharding_spec(self):
        return _api.sharding_spec_string(self.global_tensor)

    @property
    def sharding_type(self):
        from .xla_sharding import ShardingType
        t = _api.sharding_type(self.global_tensor)
        return None if t is None else ShardingType(t)

    def __repr__(self):
        return f"XLAShardedTensor({self.global_tensor!r}, sharding_spec={self.sharding_spec!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(x):
            return x.global_tensor if isinstance(x, XLAShardedTensor) else x

        def wrap(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor) and x.device.type == "xla":
                return XLAShardedTensor(x)
            return x

        args = torch.utils._pytree.tree_map(unwrap, args)
        kwargs = torch.utils._pytree.tree_map(unwrap, kwargs or {})
        out = func(*args, **kwargs)
        return torch.utils._pytree.tree_map(wrap, out)


def _to_torch(jarr, dtype):
    import numpy as np
    host = np.array(jarr)
    if host.dtype.kind == "V" or str(host.dtype) == "bfloat16":
        host = host.astype(np.float32)
    return torch.from_numpy(host).to(dtype)
