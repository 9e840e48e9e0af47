"""FSDPv2: fully sharded data parallelism expressed as SPMD shardings.

`SpmdFullyShardedDataParallel(module, mesh=...)` shards every parameter of
`module` over the mesh axis 'fsdp' (along its largest dimension), and shards
the forward output's batch dimension likewise (with `auto_wrap_policy`, the
selected submodules first become units of their own, as in
torch_xla.distributed.fsdp.wrap); XLA's SPMD partitioner inserts
the all-gathers and reduce-scatters. The batch is expected to be sharded over
'fsdp' too (e.g. MpDeviceLoader with input_sharding).
"""
import warnings

import torch
import torch.nn as nn

import torch_xla.distributed.spmd as spmd


def _prepare_spmd_partition_spec(t, extra_data_axis=None, shard_maximal=False):
    """('fsdp' on dim 0, or on the largest dim with shard_maximal; None elsewhere)."""
    spec = [None] * t.dim()
    if not spec:
        return ()
    i = list(t.shape).index(max(t.shape)) if shard_maximal else 0
    spec[i] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
    return tuple(spec)


class SpmdFullyShardedDataParallel(nn.Module):
    """Wrap `module` for FSDPv2 over `mesh` (default: the global mesh), which must
    have an axis named 'fsdp'. `shard_output(output, mesh)` annotates the
    forward output (default: the first tensor's batch dimension over 'fsdp',
    and over `extra_data_axis` too when given)."""

    def __init__(self, module, mesh=None, shard_output=None, auto_wrap_policy=None,
                 auto_wrapper_callable=None, extra_data_axis=None):
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP")
        fwd = getattr(type(module), "forward", None)
        if fwd is None or fwd is nn.Module.forward:
            raise RuntimeError("The module wrapped by FSDP must define a `forward` method "
                               "(do not wrap nn.ModuleList / nn.ModuleDict)")
        if mesh is None:
            mesh = spmd.get_global_mesh()
            if mesh is None:
                raise ValueError("No mesh is provided and no global mesh is set. Please provide a mesh.")
        if mesh.axis_names is None or "fsdp" not in mesh.axis_names:
            raise ValueError("The mesh must have an axis named 'fsdp'.")
        if extra_data_axis and extra_data_axis not in mesh.axis_names:
            raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh.")
        super().__init__()
        if auto_wrap_policy is not None:
            from torch_xla.distributed.fsdp.wrap import recursive_wrap
            for name, sub in module.named_modules():
                if isinstance(sub, SpmdFullyShardedDataParallel):
                    raise ValueError(f"{name} is already wrapped; an auto_wrap_policy cannot be combined with "
                                     "wrapping by hand")
            # children first, each a unit of its own with the same mesh and output sharding
            recursive_wrap(module, auto_wrap_policy=auto_wrap_policy,
                           wrapper_cls=auto_wrapper_callable or SpmdFullyShardedDataParallel,
                           ignored_modules=set(), ignored_params=set(), only_wrap_children=True,
                           mesh=mesh, shard_output=shard_output, extra_data_axis=extra_data_axis)
        self._orig_module = module.to("xla")
        self._mesh = mesh
        import torch_xla
        for p in module.parameters():
            if torch_xla._XLAC._get_xla_sharding_spec(p) != "":
                continue  # the user sharded it already
            # as upstream, a dim that does not divide over 'fsdp' is sharded too:
            # each device holds its padded shard (a vocabulary of 50,257 rows)
            spmd.mark_sharding(p, mesh, _prepare_spmd_partition_spec(p, shard_maximal=True))
        spmd.apply_backward_optimization_barrier(module)
        if shard_output is None:
            def shard_output(output, mesh):
                real = output
                if isinstance(output, tuple):
                    real = output[0]
                    warnings.warn("The output is a tuple, but only the first element is sharded. "
                                  "If this is not intended, please provide your own shard_output callable.")
                if not isinstance(real, torch.Tensor):
                    raise RuntimeError(f"The output type is not supported: {type(output)}. "
                                       "Please provide your own shard_output callable.")
                spmd.mark_sharding(real, mesh, _prepare_spmd_partition_spec(real, extra_data_axis))
        self._shard_output = shard_output

    @property
    def module(self):
        return self._orig_module

    def forward(self, *args, **kwargs):
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key):
        return self.module.__getitem__(key)


__all__ = ["SpmdFullyShardedDataParallel"]
