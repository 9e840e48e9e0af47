"""XLAShardedTensor: an XLA tensor seen with its sharding, and a DTensor.

It wraps the global XLA tensor (`global_tensor`); ops on it run on the global
tensor and wrap their results again. `local_shards` reads each device's shard
(from the JAX array's addressable shards), `sharding_spec` is upstream's text.

As upstream, the class derives from torch's DTensor, so DTensor code accepts
it: `_spec` (a DTensorSpec over an `xla` DeviceMesh, built from `mesh_shape`
and `partition_spec`, cached until they change), `placements`, `device_mesh`
and `redistribute(mesh, placements)`. One placement per mesh dimension
(`Shard(d)` / `Replicate()`) and one partition-spec entry per tensor dimension
(a mesh dimension, a tuple of them, or None) say the same thing; the helpers
below turn one into the other.
"""
import dataclasses

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

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


_PLACEMENTS_MISSING = (
    "Placements not available: XLAShardedTensor requires mesh_shape and "
    "partition_spec to be set. Use mark_sharding() to properly initialize sharding information.")


def placements_to_partition_spec(placements, ndim):
    """The partition spec (one entry per tensor dimension) of DTensor `placements`
    (one per mesh dimension) for a tensor of rank `ndim`. A dimension sharded over
    several mesh dimensions gets their tuple, in mesh order (DTensor's order).
    Partial -> NotImplementedError, Shard(d) out of range -> IndexError."""
    spec = [[] for _ in range(ndim)]
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Replicate):
            continue
        if isinstance(p, Partial):
            raise NotImplementedError(
                "Partial placement is not supported on XLA: use Shard or Replicate placements")
        if not isinstance(p, Shard):
            raise NotImplementedError(f"placement {p!r} is not supported on XLA: use Shard or Replicate")
        d = p.dim + ndim if p.dim < 0 else p.dim
        if not 0 <= d < ndim:
            raise IndexError(f"Shard dimension {p.dim} is out of bounds for tensor with {ndim} dimensions")
        spec[d].append(mesh_dim)
    return tuple(None if not s else s[0] if len(s) == 1 else tuple(s) for s in spec)


def partition_spec_to_placements(partition_spec, mesh_ndim, axis_index=None):
    """The DTensor placements (one per mesh dimension) of `partition_spec`;
    `axis_index(name)` resolves axis names. ValueError when the spec names an
    unknown axis or shards one tensor dimension over mesh dimensions out of
    mesh order (no Shard placements say that)."""
    placements = [Replicate() for _ in range(mesh_ndim)]
    for tensor_dim, entry in enumerate(partition_spec):
        if entry is None:
            continue
        axes = entry if isinstance(entry, tuple) else (entry,)
        idx = []
        for a in axes:
            if isinstance(a, str):
                i = axis_index(a) if axis_index is not None else None
                if i is None:
                    raise ValueError(f"partition_spec {partition_spec} names axis {a!r}, which the mesh does not have")
            else:
                i = int(a)
            if not 0 <= i < mesh_ndim:
                raise ValueError(f"partition_spec {partition_spec} uses mesh dimension {i} of a {mesh_ndim}-D mesh")
            if not isinstance(placements[i], Replicate):
                raise ValueError(f"partition_spec {partition_spec} uses mesh dimension {i} twice")
            placements[i] = Shard(tensor_dim)
            idx.append(i)
        if idx != sorted(idx):
            raise ValueError(f"partition_spec {partition_spec} shards dimension {tensor_dim} over mesh "
                             f"dimensions {tuple(idx)}, out of mesh order: DTensor placements cannot say that")
    return tuple(placements)


class XLAShardedTensor(DTensor):
    """A global tensor (`global_tensor`) with its layout: `mesh_shape` and
    `partition_spec` (what mark_sharding was given; None on results of ops,
    whose layout XLA's partitioner decides)."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem, mesh_shape=None, partition_spec=None, *args, **kwargs):
        mesh = None
        if isinstance(elem, XLAShardedTensor):
            mesh_shape = mesh_shape if mesh_shape is not None else elem.mesh_shape
            partition_spec = partition_spec if partition_spec is not None else elem.partition_spec
            if elem._mesh is not None and elem._mesh.mesh_shape == _shape_tuple(mesh_shape):
                mesh = elem._mesh
            elem = elem.global_tensor
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=kwargs.get("requires_grad", elem.requires_grad))
        r.global_tensor = elem
        r.mesh_shape = mesh_shape
        r.partition_spec = partition_spec
        r._mesh = mesh   # the xs.Mesh of the annotation, when known (its device order, axis names)
        r._cached_spec = None
        return r

    def __init__(self, *args, **kwargs):
        pass   # everything is set in __new__ (DTensor's __init__ expects its own arguments)

    # -- torch.compile / AOTAutograd see the global tensor inside ----------------------

    def __tensor_flatten__(self):
        return ["global_tensor"], (self.mesh_shape, self.partition_spec, self._mesh)

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        mesh_shape, partition_spec, mesh = meta
        r = XLAShardedTensor(inner["global_tensor"], mesh_shape, partition_spec)
        r._mesh = mesh
        return r

    def __coerce_tangent_metadata__(self):
        return self

    def __coerce_same_metadata_as_tangent__(self, flatten_spec, expected_type=None):
        if expected_type is not None and expected_type is not type(self):
            return None
        return self

    # -- shards ------------------------------------------------------------------------

    @property
    def local_shards(self):
        """Each device's shard, in device order (CPU tensors); under an uneven
        layout each is zero-padded to the common shard shape (as the devices hold it)."""
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
        self.invalidate_spec_cache()

    @property
    def sharding_spec(self):
        if not _api.is_xla_tensor(self.global_tensor):
            return ""
        return _api.sharding_spec_string(self.global_tensor)

    @property
    def sharding_type(self):
        from .xla_sharding import ShardingType
        if not _api.is_xla_tensor(self.global_tensor):
            return None
        t = _api.sharding_type(self.global_tensor)
        return None if t is None else ShardingType(t)

    def __repr__(self):
        return f"XLAShardedTensor({self.global_tensor!r}, sharding_spec={self.sharding_spec!r})"

    # -- DTensor's view ----------------------------------------------------------------

    @property
    def _spec(self):
        """A DTensorSpec: the mesh as an `xla` DeviceMesh (the annotation's device
        order and string axis names when known, else devices 0..N-1 in order),
        placements from `partition_spec`, the global tensor's metadata. Cached
        until `invalidate_spec_cache` (wrap_as_sharded_tensor and redistribute call
        it). ValueError when mesh_shape or partition_spec is unknown (results of
        ops: XLA's partitioner decides their layout)."""
        if self._cached_spec is not None:
            return self._cached_spec
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
        if self.mesh_shape is None:
            raise ValueError(
                "mesh_shape must be specified to create DTensorSpec. If this tensor was created "
                "through torch operations, it may be auto-wrapped. Use wrap_as_sharded_tensor() "
                "to set mesh_shape before accessing _spec.")
        if self.partition_spec is None:
            raise ValueError(
                "partition_spec must be specified to create DTensorSpec. If this tensor was created "
                "through torch operations, it may be auto-wrapped. Use wrap_as_sharded_tensor() "
                "to set partition_spec before accessing _spec.")
        shape = _shape_tuple(self.mesh_shape)
        mesh, names, ids = self._mesh, None, None
        if mesh is not None and mesh.mesh_shape == shape:
            ids = torch.as_tensor(mesh.get_logical_mesh().astype("int64"))
            if mesh.axis_names is not None and all(isinstance(a, str) for a in mesh.axis_names):
                names = tuple(mesh.axis_names)
        else:
            mesh = None
            ids = torch.arange(_device_count()).reshape(shape)
        axis_index = mesh.get_axis_name_idx if mesh is not None else None
        placements = partition_spec_to_placements(tuple(self.partition_spec), len(shape), axis_index)
        g = self.global_tensor
        self._cached_spec = DTensorSpec(
            mesh=DeviceMesh("xla", ids, mesh_dim_names=names), placements=placements,
            tensor_meta=TensorMeta(shape=g.shape, stride=g.stride(), dtype=g.dtype))
        return self._cached_spec

    @property
    def placements(self):
        """One placement per mesh dimension (Shard(d) / Replicate()); ValueError
        when the layout is unknown (see `_spec`)."""
        try:
            return self._spec.placements
        except ValueError:
            raise ValueError(_PLACEMENTS_MISSING) from None

    def invalidate_spec_cache(self):
        self._cached_spec = None

    def full_tensor(self, *, grad_placements=None):
        """The whole tensor: the global XLA tensor."""
        return self.global_tensor

    def to_local(self, *, grad_placements=None):
        raise NotImplementedError(
            "XLAShardedTensor.to_local: an XLA SPMD tensor is one global tensor (global_tensor); "
            "each device's piece is in local_shards")

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False,
                     forward_dtype=None, backward_dtype=None):
        """This tensor laid out as `placements` (one per mesh dimension: Shard(d)
        or Replicate()) over `device_mesh` (an xs.Mesh or an `xla` DeviceMesh;
        default: this tensor's mesh). XLA moves the data: device data is re-laid
        out now, a pending value gets a sharding constraint. The global tensor is
        re-annotated in place (this wrapper follows); with async_op=True a copy
        is, and this tensor keeps its layout. forward_dtype casts the result."""
        if placements is None:
            raise ValueError("redistribute needs placements (one per mesh dimension)")
        if backward_dtype is not None:
            raise NotImplementedError("XLAShardedTensor.redistribute: backward_dtype is not supported")
        mesh = self._target_mesh(device_mesh)
        placements = tuple(placements)
        if len(placements) != len(mesh.mesh_shape):
            raise ValueError(f"Number of placements ({len(placements)}) must match mesh dimensions "
                             f"({len(mesh.mesh_shape)})")
        spec = placements_to_partition_spec(placements, self.global_tensor.dim())
        from .xla_sharding import mark_sharding
        t = self.global_tensor
        in_place = not async_op and forward_dtype is None
        if async_op:
            t = t.clone()
        if forward_dtype is not None:
            t = t.to(forward_dtype)
        out = mark_sharding(t, mesh, spec)
        if in_place:   # this wrapper's global tensor now has the new layout
            self.mesh_shape, self.partition_spec, self._mesh = out.mesh_shape, out.partition_spec, mesh
            self.invalidate_spec_cache()
        return out

    def _target_mesh(self, device_mesh):
        from .xla_sharding import Mesh
        if isinstance(device_mesh, Mesh):
            return device_mesh
        if device_mesh is None:
            if self._mesh is not None:
                return self._mesh
            if self.mesh_shape is None:
                raise ValueError("redistribute: no device_mesh given and this tensor's mesh is unknown")
            shape = _shape_tuple(self.mesh_shape)
            return Mesh(list(range(_device_count())), shape)
        if getattr(device_mesh, "device_type", None) is not None:
            from .api import convert_to_xla_mesh
            return convert_to_xla_mesh(device_mesh)
        raise TypeError(f"redistribute: device_mesh must be an xs.Mesh or an xla DeviceMesh, got {device_mesh!r}")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        """Runs `func` on the global tensors; tensor results come back wrapped (with
        no mesh_shape / partition_spec: XLA's partitioner decides their layout).
        A result copied to the host is wrapped too, as upstream (`.cpu().global_tensor`)."""
        def unwrap(x):
            return x.global_tensor if isinstance(x, XLAShardedTensor) else x

        def wrap(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor):
                return XLAShardedTensor(x)
            return x

        args = torch.utils._pytree.tree_map(unwrap, args)
        kwargs = torch.utils._pytree.tree_map(unwrap, kwargs or {})
        out = func(*args, **kwargs)
        return torch.utils._pytree.tree_map(wrap, out)


def _shape_tuple(mesh_shape):
    return None if mesh_shape is None else tuple(int(d) for d in mesh_shape)


def _device_count():
    import torch_xla.runtime as xr
    return xr.global_runtime_device_count()


def _to_torch(jarr, dtype):
    import numpy as np
    host = np.array(jarr)
    if host.dtype.kind == "V" or str(host.dtype) == "bfloat16":
        host = host.astype(np.float32)
    return torch.from_numpy(host).to(dtype)
