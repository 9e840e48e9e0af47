"""Meshes, partition specs and sharding annotations (torch_xla.distributed.spmd).

A `Mesh` names a logical arrangement of the SPMD devices (device ids are
indices into `xr.global_runtime_device_count()` devices). A partition spec
gives, for each tensor dimension, the mesh axis (index or name), a tuple of
axes, or None (replicated along that dimension). `mark_sharding` turns the
pair into a JAX NamedSharding and hands it to the engine: device data is
placed shard by shard, a pending value gets a sharding constraint that XLA's
SPMD partitioner propagates.
"""
import collections
import enum

import types

import numpy as np

import torch

import torch_xla.runtime as xr
from torch_xla.engine import api as _api

from .xla_sharded_tensor import XLAShard, XLAShardedTensor  # noqa: F401


class ShardingType(enum.IntEnum):
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


class OpSharding:
    """A partition spec laid over a mesh (what Mesh.get_op_sharding returns)."""
    __slots__ = ("sharding", "ndim")

    def __init__(self, sharding, ndim):
        self.sharding = sharding
        self.ndim = ndim

    def __repr__(self):
        return f"OpSharding({_api.format_sharding(self.sharding, self.ndim)})"


class MeshError(AssertionError, ValueError):
    """A mesh that does not fit the devices. Upstream asserts (AssertionError);
    it is a ValueError too, since the arguments are what is wrong."""


class Mesh:
    """A logical mesh: `device_ids` (a permutation of 0..N-1, N the SPMD device
    count) laid out as `mesh_shape`, with optional `axis_names`.

        mesh = Mesh(np.arange(8), (4, 2), ("data", "model"))
        mesh.shape()  # OrderedDict([('data', 4), ('model', 2)])
    """

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        device_ids = np.asarray(device_ids)
        mesh_shape = tuple(int(d) for d in mesh_shape)
        n = xr.global_runtime_device_count()
        if n <= 0:
            raise RuntimeError("Mesh needs XLA devices")
        if len(device_ids) != n:
            raise MeshError(
                f"Number of device IDs ({len(device_ids)}) must match the global number of devices ({n})")
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise MeshError(
                    f"Number of axis names ({len(axis_names)}) must match mesh dimensions ({len(mesh_shape)})")
            if len(set(axis_names)) != len(axis_names):
                raise MeshError(f"Axis names must be unique, got: {axis_names}")
        size = int(np.prod(mesh_shape))
        if len(device_ids) != size:
            raise MeshError(f"Number of device IDs ({len(device_ids)}) must match mesh size ({size})")
        if len(np.unique(device_ids)) != len(device_ids):
            raise MeshError(f"Device IDs must be unique, got: {device_ids}")
        if not all(0 <= int(d) < size for d in device_ids.flat):
            raise MeshError(f"Device IDs must be less than mesh size ({size}), got: {device_ids}")
        self.device_ids = device_ids
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        self._jax_mesh = None
        self._shardings = {}   # translated partition spec -> NamedSharding (_named_sharding)

    def size(self):
        return int(np.prod(self.mesh_shape))

    def shape(self):
        names = self.axis_names if self.axis_names is not None else range(len(self.mesh_shape))
        return collections.OrderedDict(zip(names, self.mesh_shape))

    def get_logical_mesh(self):
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name):
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.mesh_shape == other.mesh_shape
                and self.axis_names == other.axis_names
                and np.array_equal(self.device_ids, other.device_ids))

    def __hash__(self):
        return hash((self.mesh_shape, self.axis_names, tuple(int(d) for d in self.device_ids.flat)))

    def __str__(self):
        return (f"{{'device_ids': {self.device_ids.tolist()}, 'mesh_shape': {self.mesh_shape}, "
                f"'axis_names': {self.axis_names}}}")

    __repr__ = __str__

    @classmethod
    def from_str(cls, mesh_str):
        """The mesh `str(mesh)` describes, or None when the text is not one."""
        import ast
        try:
            d = ast.literal_eval(mesh_str)
            return cls(d["device_ids"], tuple(d["mesh_shape"]), d["axis_names"])
        except (ValueError, SyntaxError, TypeError, KeyError):
            return None

    # -- to JAX -------------------------------------------------------------------

    def _jax_axis_names(self):
        if self.axis_names is not None:
            return tuple(str(a) for a in self.axis_names)
        return tuple(f"axis_{i}" for i in range(len(self.mesh_shape)))

    def get_jax_mesh(self):
        """This mesh as a jax.sharding.Mesh over the SPMD devices."""
        if self._jax_mesh is None:
            from jax.sharding import Mesh as JaxMesh
            devs = _api.spmd_devices()
            arr = np.empty(self.mesh_shape, dtype=object)
            for idx, d in zip(np.ndindex(*self.mesh_shape), self.device_ids.flat):
                arr[idx] = devs[int(d)]
            self._jax_mesh = JaxMesh(arr, self._jax_axis_names())
        return self._jax_mesh

    def get_op_sharding(self, partition_spec):
        """The sharding of `partition_spec` over this mesh, as an object the
        `_XLAC` sharding functions accept (upstream: an xla OpSharding)."""
        spec = tuple(partition_spec)
        return OpSharding(self._named_sharding(spec), len(spec))

    def _named_sharding(self, partition_spec):
        """The jax NamedSharding of `partition_spec` over this mesh, made once per
        spec by each Mesh object (specs naming the same axes by name or index
        share it); each one made counts `CreateOpSharding`, as upstream caches
        its OpSharding objects per mesh. Invalid specs raise ValueError here."""
        spec = _translate(self, partition_spec)
        s = self._shardings.get(spec)
        if s is None:
            s = self._shardings[spec] = self._make_sharding(spec)
            _api.metrics.counter("CreateOpSharding")
        return s

    def _make_sharding(self, spec):
        from jax.sharding import NamedSharding, PartitionSpec
        names = self._jax_axis_names()
        axes = []
        for p in spec:
            if p is None:
                axes.append(None)
            elif isinstance(p, tuple):
                axes.append(tuple(names[i] for i in p))
            else:
                axes.append(names[p])
        return NamedSharding(self.get_jax_mesh(), PartitionSpec(*axes))


class HybridMesh(Mesh):
    """A mesh over slices (`dcn_mesh_shape`) of locally connected devices
    (`ici_mesh_shape`); the logical mesh is their element-wise product. On TPUs,
    whose devices report physical coordinates, each slice's devices are arranged
    along the torus as JAX's mesh_utils does; elsewhere (CPU, GPU) in id order,
    slice by slice."""

    def __init__(self, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None):
        ici_mesh_shape = tuple(ici_mesh_shape)
        if dcn_mesh_shape is None:
            dcn_mesh_shape = (1,) * len(ici_mesh_shape)
        dcn_mesh_shape = tuple(dcn_mesh_shape)
        if len(ici_mesh_shape) != len(dcn_mesh_shape):
            raise ValueError("ici_mesh_shape and dcn_mesh_shape must have the same length")
        self.ici_mesh_shape = ici_mesh_shape
        self.dcn_mesh_shape = dcn_mesh_shape
        mesh_shape = tuple(i * d for i, d in zip(ici_mesh_shape, dcn_mesh_shape))
        attrs = _tpu_device_attributes()
        if attrs is not None:
            ids = _physical_hybrid_mesh(attrs, ici_mesh_shape, dcn_mesh_shape).flatten()
        else:
            ids = _slice_major(ici_mesh_shape, dcn_mesh_shape).flatten()
        super().__init__(ids, mesh_shape, axis_names)


def _slice_major(ici_mesh_shape, dcn_mesh_shape):
    """Each slice's devices are contiguous ids, laid out in id order."""
    per = int(np.prod(ici_mesh_shape))
    blocks = [np.arange(s * per, (s + 1) * per).reshape(ici_mesh_shape)
              for s in range(int(np.prod(dcn_mesh_shape)))]
    return _tile(blocks, dcn_mesh_shape)


def _tile(blocks, dcn_mesh_shape):
    grid = np.empty(dcn_mesh_shape, dtype=object)
    for i, idx in enumerate(np.ndindex(*dcn_mesh_shape)):
        grid[idx] = blocks[i]
    return np.block(grid.tolist())


def _tpu_device_attributes():
    """Every device's attributes sorted by ordinal, when they carry TPU coordinates; else None."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    if xm.xla_device_hw(torch_xla.device()) != "TPU":
        return None
    attrs = list(xr.global_runtime_device_attributes())
    if not attrs or any("coords" not in a for a in attrs):
        return None
    return sorted(attrs, key=lambda a: int(str(a["name"]).rsplit(":", 1)[-1]))


def _physical_mesh(attrs, devices):
    """The ordinals `devices` placed at their coordinates (x, y, z)."""
    coords = [tuple(attrs[d]["coords"]) for d in devices]
    dims = tuple(max(c[i] for c in coords) + 1 for i in range(3))
    out = np.empty(dims, dtype=int)
    for c, d in zip(coords, devices):
        out[c] = d
    return out


def _torus_mesh(attrs, mesh_shape, devices):
    physical = _physical_mesh(attrs, devices)
    try:
        from jax._src.mesh_utils import _create_device_mesh_for_nd_torus
    except ImportError:   # a JAX without it: the physical order, reshaped
        return physical.reshape(mesh_shape)
    mesh, _ = _create_device_mesh_for_nd_torus(physical, tuple(mesh_shape), allow_split_physical_axes=True)
    return mesh


def _physical_hybrid_mesh(attrs, ici_mesh_shape, dcn_mesh_shape):
    multislice = "slice_index" in attrs[0]
    n_slices = int(np.prod(dcn_mesh_shape))
    if multislice and n_slices == 1:
        raise ValueError("Provide dcn_mesh_shape to create a mesh for multislice")
    if not multislice and n_slices > 1:
        raise ValueError("Invalid dcn_mesh_shape for single slice mesh")
    if not multislice:
        return _torus_mesh(attrs, ici_mesh_shape, list(range(len(attrs))))
    slices = collections.defaultdict(list)
    for d, a in enumerate(attrs):
        slices[a["slice_index"]].append(d)
    if len(slices) != n_slices:
        raise ValueError(f"Number of slices {len(slices)} must equal the product of "
                         f"dcn_mesh_shape {dcn_mesh_shape}")
    blocks = [_torus_mesh(attrs, ici_mesh_shape, slices[k]) for k in sorted(slices)]
    return _tile(blocks, dcn_mesh_shape)


_GLOBAL_MESH = [None]


def set_global_mesh(mesh):
    """Make `mesh` the process's global mesh (get_global_mesh, FSDPv2)."""
    _GLOBAL_MESH[0] = mesh


def get_global_mesh():
    """The global mesh, or None when none was set."""
    return _GLOBAL_MESH[0]


def get_1d_mesh(axis_name=None):
    """Every SPMD device along one axis (named `axis_name` when given)."""
    n = xr.global_runtime_device_count()
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


# -- partition specs ---------------------------------------------------------------

def _translate(mesh, partition_spec):
    """Axis names -> mesh axis indices; validated (unknown axis, out of range, repeats)."""
    out = []
    for p in partition_spec:
        if isinstance(p, tuple):
            if any(isinstance(x, tuple) for x in p):
                raise ValueError("Partition spec cannot contain nested tuples")
            out.append(tuple(_axis(mesh, x, partition_spec) for x in p))
        elif p is None:
            out.append(None)
        else:
            out.append(_axis(mesh, p, partition_spec))
    flat = [a for p in out if p is not None for a in (p if isinstance(p, tuple) else (p,))]
    if len(flat) != len(set(flat)):
        raise ValueError(
            f"Each device mesh dimension should appear at most once in partition_spec {partition_spec}.")
    return tuple(out)


def _axis(mesh, p, partition_spec):
    if isinstance(p, str):
        idx = mesh.get_axis_name_idx(p)
        if idx is None:
            raise ValueError(f"Axis name {p} is not defined in the given mesh {mesh} "
                             f"(partition_spec {partition_spec})")
        return idx
    if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
        if not 0 <= int(p) < len(mesh.mesh_shape):
            raise ValueError(f"partition_spec ({partition_spec}) contains out of bound index into "
                             f"mesh_shape {mesh.mesh_shape}.")
        return int(p)
    raise ValueError(f"Spec type {type(p)} is not supported in partition spec")


def _check(t, mesh, partition_spec):
    """The spec translated to mesh axis indices; ValueError naming the tensor's
    shape, the mesh and the spec when it does not fit. A dimension that does not
    divide over its axes is fine: its shards are padded (see mark_sharding)."""
    shape = tuple(t.shape)
    if len(shape) != len(partition_spec):
        raise ValueError(
            f"Partition spec length ({len(partition_spec)}) should be equal to the input rank "
            f"({len(shape)}): tensor of shape {list(shape)}, mesh {mesh}, partition_spec {partition_spec}")
    return _translate(mesh, partition_spec)


def _xla_tensor(t):
    t = unwrap_sharded_tensor(t)
    if not _api.is_xla_tensor(t):
        raise TypeError(f"mark_sharding expects a tensor on the XLA device, got one on {t.device}")
    return t


def _require_spmd():
    if not _api.topology.spmd_enabled():   # the runtime's mode (xr.is_spmd() reads the env var)
        raise RuntimeError("sharding needs SPMD mode: call torch_xla.runtime.use_spmd() first")


def mark_sharding(t, mesh, partition_spec):
    """Annotate XLA tensor (or Parameter) `t` with `partition_spec` over `mesh`,
    in place; returns it wrapped as an XLAShardedTensor.

    Device data is placed at once (each device holds its shard); a pending
    value becomes a sharding constraint in its graph. A dimension that does not
    divide over its mesh axes is padded, as upstream pads it: each device holds
    its zero-padded shard, also between steps; reads see the tensor's own shape,
    and `local_shards` gives upstream's zero-padded shards."""
    _require_spmd()
    x = _xla_tensor(t)
    _check(x, mesh, partition_spec)
    _api.mark_sharding(x, mesh._named_sharding(tuple(partition_spec)))
    return _wrap_with_mesh(t, mesh, partition_spec)


class MarkShardingFunction(torch.autograd.Function):
    """Shard a value in the forward pass and its gradient in the backward pass."""

    # through torch.ops.xla.aot_mark_sharding, so AOTAutograd (aot_function,
    # torch.compile) traces it on fake tensors and keeps it in both graphs

    @staticmethod
    def forward(ctx, t, mesh, partition_spec):
        ctx.args = (str(mesh), str(tuple(partition_spec)))
        return torch.ops.xla.aot_mark_sharding(t, *ctx.args)

    @staticmethod
    def backward(ctx, grad):
        return torch.ops.xla.aot_mark_sharding(grad, *ctx.args), None, None


def mark_sharding_with_gradients(t, mesh, partition_spec):
    """A new tensor: `t` sharded as `partition_spec`, whose gradient is sharded alike
    (t itself is not changed)."""
    _require_spmd()
    x = _xla_tensor(t)
    _check(x, mesh, partition_spec)
    return MarkShardingFunction.apply(x, mesh, tuple(partition_spec))


def clear_sharding(t):
    """Drop t's annotation (its value becomes replicated); returns the plain tensor."""
    x = unwrap_sharded_tensor(t)
    _api.clear_sharding(x)
    return x


def wrap_as_sharded_tensor(t, mesh_shape=None, partition_spec=None):
    """t as an XLAShardedTensor carrying `mesh_shape` / `partition_spec` (an
    XLAShardedTensor is updated in place; its cached DTensorSpec is dropped)."""
    if not isinstance(t, XLAShardedTensor):
        return XLAShardedTensor(t, mesh_shape=mesh_shape, partition_spec=partition_spec)
    if mesh_shape is not None:
        t.mesh_shape = mesh_shape
        if t._mesh is not None and t._mesh.mesh_shape != tuple(int(d) for d in mesh_shape):
            t._mesh = None
    if partition_spec is not None:
        t.partition_spec = partition_spec
    if mesh_shape is not None or partition_spec is not None:
        t.invalidate_spec_cache()
    return t


def _wrap_with_mesh(t, mesh, partition_spec):
    """wrap_as_sharded_tensor, remembering the Mesh itself (its device order and
    axis names make the DTensorSpec's DeviceMesh)."""
    st = wrap_as_sharded_tensor(t, mesh_shape=mesh.mesh_shape, partition_spec=partition_spec)
    st._mesh = mesh
    st.invalidate_spec_cache()
    return st


def unwrap_sharded_tensor(t):
    if isinstance(t, XLAShardedTensor):
        return t.global_tensor
    return t


def wrap_if_sharded(x):
    """An XLAShardedTensor around x when x is a sharded XLA tensor; x otherwise."""
    if (isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor)
            and _api.is_xla_tensor(x) and _api.current_sharding(x) is not None):
        return XLAShardedTensor(x)
    return x


def _mesh_or_global(mesh, what):
    mesh = get_global_mesh() if mesh is None else mesh
    if mesh is None:
        raise RuntimeError(f"{what}: no mesh given and no global mesh set (xs.set_global_mesh)")
    return mesh


def _mark_manual_sharding(t):
    """Mark the pending tensor t manual: from here each device's copy is its own
    value, and ops on it run per device (pair it with _spmd_shard_to_full_shape,
    as disable_manual_sharding does). Device data cannot be marked."""
    _require_spmd()
    _api.mark_manual(_xla_tensor(unwrap_sharded_tensor(t)))
    return wrap_as_sharded_tensor(t)


def enable_manual_sharding(t, partition_spec, *, mesh=None):
    """Shard t by `partition_spec` over `mesh` (default: the global mesh) and
    return each device's shard as a manually sharded tensor: ops on it run per
    device, the partitioner leaves them alone, and collectives are yours to call
    (a shard_map region). Close it with disable_manual_sharding before the graph
    is synced."""
    _require_spmd()
    mesh = _mesh_or_global(mesh, "enable_manual_sharding")
    x = mark_sharding(unwrap_sharded_tensor(t), mesh, partition_spec)
    out = _api.full_to_shard(unwrap_sharded_tensor(x))
    return _wrap_with_mesh(out, mesh, partition_spec)


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None):
    """Assemble manually sharded t (one shard per device) into the global tensor
    of `full_shape` laid out by `partition_spec` over `mesh` (default: global)."""
    _require_spmd()
    mesh = _mesh_or_global(mesh, "disable_manual_sharding")
    x = _xla_tensor(unwrap_sharded_tensor(t))
    out = _api.shard_to_full(x, mesh._named_sharding(tuple(partition_spec)), full_shape, mark=True)
    return _wrap_with_mesh(out, mesh, partition_spec)


def apply_backward_optimization_barrier(m):
    """Put the gradients of m's parameters and m's input gradients through one
    optimization barrier after m's backward (a full backward hook), so XLA does
    not fuse m's backward with the rest (which can need huge buffers)."""

    def barrier(module, grad_input, grad_output):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        grads += [g for g in grad_input if isinstance(g, torch.Tensor)]
        _api.optimization_barrier_(grads)

    m.register_full_backward_hook(barrier)


class ShardingSpec:
    """A mesh and a partition spec, applied to tensors later (MpDeviceLoader's
    `input_sharding`): `apply(t)` marks t; `can_apply(t)` says whether t's rank fits.

    minibatch=True (upstream's meaning): each host loads its own part of the
    global batch, so a tensor given to the loader is this host's rows of dim 0,
    and the global batch has dim 0 times (global devices / this host's devices)
    when the batch axes span every device (hosts that are replicas along them,
    a batch axis within each host, all load the same whole batch). That per-host
    batch must divide over this host's devices (RuntimeError otherwise, as
    upstream). With one host the per-host batch is the global one."""

    def __init__(self, mesh, partition_spec, minibatch=False):
        self.mesh = mesh
        self.partition_spec = tuple(partition_spec)
        self.minibatch = bool(minibatch)
        _translate(mesh, self.partition_spec)

    def can_apply(self, t):
        return len(t.shape) == len(self.partition_spec)

    def apply(self, t):
        mark_sharding(t, self.mesh, self.partition_spec)

    def __repr__(self):
        mb = ", minibatch=True" if self.minibatch else ""
        return f"ShardingSpec(mesh={self.mesh}, partition_spec={self.partition_spec}{mb})"


def _check_minibatch(cpu):
    local = xr.addressable_runtime_device_count()
    if cpu.dim() > 0 and cpu.shape[0] % local != 0:
        raise RuntimeError(
            "When minibatch is configured, the per-host batch size must be divisible by local runtime "
            f"device count. Per host input data shape = {cpu.size()}, local_runtime_device_count = {local}")


def _input_to_device(cpu, upload, input_sharding):
    """A CPU tensor of a loaded batch on the SPMD device, laid out as upstream's
    send_cpu_data_to_device does: by `input_sharding` (a ShardingSpec) where its
    rank fits, else replicated (its sharding spec reads '{replicated}', where a
    tensor moved with .to() has none). upload(cpu) -> the XLA tensor."""
    fits = input_sharding is not None and input_sharding.can_apply(cpu)
    if fits and input_sharding.minibatch:
        _check_minibatch(cpu)
        if xr.process_count() > 1:
            return _minibatch_global(cpu, input_sharding)
    t = upload(cpu)
    if fits:
        input_sharding.apply(t)
    else:
        _api.mark_sharding(t, _api.topology.replicated())
    return t


def _minibatch_global(cpu, spec):
    """Several hosts: the global batch whose rows on this host's devices are `cpu`.
    Its shape follows from the rows this host's devices cover (JAX infers it): with
    the batch axis over every device, dim 0 times (global / local devices); where
    hosts are replicas along the batch axis (a mesh whose batch axis lies within a
    host), each host's batch is the whole one."""
    import jax
    sharding = spec.mesh._named_sharding(spec.partition_spec)
    arr = jax.make_array_from_process_local_data(sharding, _api.storage_numpy(cpu))
    t = _api.from_device_array(arr, cpu.dtype)
    _api.mark_sharding(t, sharding)
    return t


# -- nn.Linear through einsum ------------------------------------------------------
# nn.Linear lowers through matmul, which flattens the leading dims to 2-D and
# mixes a sharded batch dim with the others; einsum keeps every dim, so XLA's
# partitioner can follow the annotations through forward and backward.

def _autocast_wrappers():
    amp = getattr(torch, "amp", None)
    fwd, bwd = getattr(amp, "custom_fwd", None), getattr(amp, "custom_bwd", None)
    if fwd is None or bwd is None:   # torch without device-generic custom_fwd
        return (lambda f: f), (lambda f: f)
    dtype = torch.get_autocast_dtype("xla") if hasattr(torch, "get_autocast_dtype") else torch.bfloat16
    return fwd(device_type="xla", cast_inputs=dtype), bwd(device_type="xla")


_fwd_autocast, _bwd_autocast = _autocast_wrappers()


def _contract(a, b, dims_a, dims_b):
    """a and b contracted over dims_a / dims_b (free dims of a, then of b) as one
    XLA DotGeneral (torch's einsum would flatten the free dims to 2-D with
    reshapes); torch.tensordot, the same contraction, off the device."""
    if a.device.type != "xla":
        return torch.tensordot(a, b, dims=(list(dims_a), list(dims_b)))
    import jax
    from torch_xla.core import xla_builder
    dt = torch.promote_types(a.dtype, b.dtype)
    precision = jax.lax.Precision.HIGHEST if dt == torch.float32 else None  # as aten.mm
    return xla_builder.call_jax(
        jax.lax.dot_general, (a.to(dt), b.to(dt)),
        {"dimension_numbers": ((tuple(dims_a), tuple(dims_b)), ((), ())), "precision": precision},
        name="xla_patched_linear")


class XLAPatchedLinear(torch.autograd.Function):
    """`torch.nn.functional.linear` written as dot products over the last dims in
    forward and backward (sharding annotations survive; no 2-D flattening).
    Under autocast its inputs are cast to the autocast dtype and its backward
    runs in the same precision as its forward."""

    @staticmethod
    @_fwd_autocast
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        out = _contract(input, weight, [input.dim() - 1], [1])
        return out if bias is None else out + bias

    @staticmethod
    @_bwd_autocast
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        need = ctx.needs_input_grad
        lead = list(range(grad_output.dim() - 1))
        grad_input = _contract(grad_output, weight, [len(lead)], [0]) if need[0] else None
        grad_weight = _contract(grad_output, input, lead, lead) if need[1] else None
        grad_bias = None
        if bias is not None and len(need) > 2 and need[2]:
            grad_bias = torch.einsum("...m->m", grad_output)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m, input):
    """What an `nn.Linear` m computes on `input`, through XLAPatchedLinear."""
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


class EinsumLinear(torch.nn.Linear):
    """An `nn.Linear` whose forward is XLAPatchedLinear."""

    def forward(self, input):
        return xla_patched_nn_linear_forward(self, input)


def apply_xla_patch_to_nn_linear(module, patched_function=xla_patched_nn_linear_forward):
    """Make every `nn.Linear` in `module` (itself included) compute through
    `patched_function(linear, input)` (default: XLAPatchedLinear), by replacing
    the instance's `forward` (and the original forward `checkpoint_module`
    keeps aside). A Linear whose forward was already replaced is left alone.
    Returns `module`."""
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            for attr in ("forward", "_xla_checkpointed_forward_original"):
                bound = getattr(m, attr, None)
                if getattr(bound, "__func__", None) is not torch.nn.Linear.forward:
                    continue
                m._nn_linear_forward_original = bound
                setattr(m, attr, types.MethodType(patched_function, m))
    return module
