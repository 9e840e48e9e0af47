"""torch's DTensor API on XLA SPMD (torch_xla.distributed.spmd.api).

torch's `distribute_tensor` / `distribute_module` hand a DeviceMesh of device
type "xla" to `xla_distribute_tensor` / `xla_distribute_module` here. A
DeviceMesh becomes an `xs.Mesh` over the same device ids in the same shape
(`convert_to_xla_mesh`), the placements (one per mesh dimension) a partition
spec (one entry per tensor dimension: `convert_to_xla_partition_spec`), and the
tensor is annotated with `mark_sharding`: there is one global tensor, which XLA
lays out over the devices, and the result is an XLAShardedTensor (a DTensor)
around it. Everything here switches the runtime to SPMD first, as upstream.
"""
import inspect
import warnings

import torch
from torch.distributed.tensor.placement_types import Replicate

import torch_xla.runtime as xr

from .xla_sharded_tensor import XLAShardedTensor, placements_to_partition_spec
from .xla_sharding import Mesh, ShardingType, mark_sharding


def _ensure_spmd():
    if not xr.is_spmd():
        xr.use_spmd()   # RuntimeError when device data already exists outside SPMD


def auto_policy(mod_name, mod, mesh):
    """The `partition_fn` that asks xla_distribute_module for XLA's
    auto-sharding (not supported here: NotImplementedError)."""
    return None


def convert_to_xla_mesh(dt_mesh):
    """The xs.Mesh of DeviceMesh `dt_mesh`: its device ids flattened in order,
    its shape, its dimension names. The mesh must cover every SPMD device
    (AssertionError otherwise, as upstream)."""
    _ensure_spmd()
    n = xr.global_runtime_device_count()
    assert dt_mesh.size() == n, (
        f"the DeviceMesh has {dt_mesh.size()} devices; an XLA mesh covers all {n} SPMD devices")
    ids = dt_mesh.mesh.flatten().tolist()
    names = dt_mesh.mesh_dim_names
    return Mesh(ids, tuple(dt_mesh.mesh.size()), None if names is None else tuple(names))


def convert_to_xla_partition_spec(tensor, placements):
    """The partition spec of DTensor `placements` for `tensor`: entry d names the
    mesh dimension(s) tensor dimension d is sharded over (a tuple when several,
    in mesh order), None where it is replicated.

        placements [Replicate(), Shard(0)] on a 3-D tensor -> (1, None, None)

    Placements other than Shard and Replicate raise ValueError."""
    _ensure_spmd()
    try:
        return placements_to_partition_spec(tuple(placements), tensor.dim())
    except NotImplementedError as e:
        raise ValueError(str(e)) from None


def xla_distribute_tensor(tensor, device_mesh, placements=None):
    """`tensor` laid out over the devices of `device_mesh` (device type "xla")
    as `placements` (one per mesh dimension; default: replicated), as an
    XLAShardedTensor around the global XLA tensor. A CPU tensor is copied to
    the device first; an XLA tensor is annotated in place (a module parameter
    stays the module's parameter, now sharded). A dimension that does not
    divide over its mesh dimensions is padded inside XLA (torch.chunk-like
    shards)."""
    _ensure_spmd()
    if device_mesh is None:
        raise ValueError("xla_distribute_tensor needs a device_mesh")
    if device_mesh.device_type != "xla":
        raise ValueError(f"xla_distribute_tensor: the DeviceMesh's device type is "
                         f"{device_mesh.device_type!r}, not 'xla'")
    mesh = convert_to_xla_mesh(device_mesh)
    if placements is None:
        placements = [Replicate() for _ in range(device_mesh.ndim)]
    placements = tuple(placements)
    if len(placements) != device_mesh.ndim:
        raise ValueError(f"`placements` must have the same length as `device_mesh.ndim`! Found placements "
                         f"length: {len(placements)}, and device_mesh.ndim: {device_mesh.ndim}.")

    if isinstance(tensor, XLAShardedTensor):
        kind = tensor.sharding_type
        if kind is not None and kind != ShardingType.REPLICATED:
            raise ValueError(
                f"the XLAShardedTensor is already sharded ({tensor.sharding_spec}); clear its sharding "
                "first (torch_xla.distributed.spmd.clear_sharding)")
        tensor = tensor.global_tensor
    elif type(tensor).__name__ == "DTensor":
        raise ValueError("Cannot distribute a DTensor with local tensor on xla devices. "
                         "The input tensor must be global.")
    if not tensor.is_meta and tensor.device.type != "xla":
        tensor = tensor.to("xla")
    partition_spec = convert_to_xla_partition_spec(tensor, placements)
    return mark_sharding(tensor, mesh, partition_spec)


def _hook_arity(fn, what):
    n = len(inspect.signature(fn).parameters)
    if n == 2:
        warnings.warn(f"Deprecating {what} that takes two arguments ({'inputs' if what == 'input_fn' else 'outputs'}, "
                      f"device_mesh), please use {what} that takes in (module, "
                      f"{'inputs' if what == 'input_fn' else 'outputs'}, device_mesh) instead!")
    elif n != 3:
        raise ValueError(f"{what} should take in 3 arguments, but got {n} arguments!")
    return n


def xla_distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None, output_fn=None):
    """Shard `module` over `device_mesh`: `partition_fn(name, submodule, mesh)` is
    called for every submodule (itself included; it shards parameters with
    distribute_tensor / mark_sharding); parameters it leaves alone stay
    replicated. `input_fn(module, inputs, mesh)` becomes a forward pre-hook and
    `output_fn(module, outputs, mesh)` a forward hook (the two-argument forms
    without the module still work, with a deprecation warning). Returns
    `module`. `partition_fn=auto_policy` (XLA's auto-sharding) is not supported."""
    _ensure_spmd()
    if partition_fn is not None:
        if getattr(partition_fn, "__name__", None) == "auto_policy":
            raise NotImplementedError(
                "xla_distribute_module(partition_fn=auto_policy): XLA's auto-sharding is not supported "
                "in this torch_xla; shard parameters with a partition_fn (distribute_tensor / mark_sharding)")
        for name, submod in module.named_modules():
            partition_fn(name, submod, device_mesh)

    if input_fn is not None:
        if _hook_arity(input_fn, "input_fn") == 2:
            module.register_forward_pre_hook(lambda _, inputs: input_fn(inputs, device_mesh))
        else:
            module.register_forward_pre_hook(lambda mod, inputs: input_fn(mod, inputs, device_mesh))
    if output_fn is not None:
        if _hook_arity(output_fn, "output_fn") == 2:
            module.register_forward_hook(lambda mod, inputs, outputs: output_fn(outputs, device_mesh))
        else:
            module.register_forward_hook(lambda mod, inputs, outputs: output_fn(mod, outputs, device_mesh))
    module._distribute_module_applied = True   # torch's distribute_module refuses a second call
    return module


__all__ = [
    "auto_policy", "convert_to_xla_mesh", "convert_to_xla_partition_spec",
    "xla_distribute_tensor", "xla_distribute_module",
]
