"""torch_xla.distributed.spmd (xs): sharding annotations for SPMD.

`xr.use_spmd()` makes `xla:0` one logical device over every local device;
`Mesh` / `HybridMesh` / `get_1d_mesh` arrange the devices; `mark_sharding`
lays a tensor out over the mesh (see xla_sharding.py); enable_manual_sharding /
disable_manual_sharding open and close manual (shard_map) regions.
XLAShardedTensor is a torch DTensor; torch's distribute_tensor /
distribute_module on an "xla" DeviceMesh come to api.py (xla_distribute_tensor,
xla_distribute_module, convert_to_xla_mesh). What is not built (auto-sharding,
shard_as, annotate_custom_sharding) raises NotImplementedError naming itself.
Distributed checkpoints: torch_xla.experimental.distributed_checkpoint.
"""
from .xla_sharded_tensor import XLAShard, XLAShardedTensor
from .xla_sharding import (
    HybridMesh, MarkShardingFunction, apply_backward_optimization_barrier, Mesh, ShardingSpec, ShardingType, clear_sharding,
    _mark_manual_sharding, disable_manual_sharding, enable_manual_sharding, get_1d_mesh,
    EinsumLinear, XLAPatchedLinear, apply_xla_patch_to_nn_linear, xla_patched_nn_linear_forward, get_global_mesh, mark_sharding, mark_sharding_with_gradients,
    set_global_mesh, unwrap_sharded_tensor, wrap_as_sharded_tensor, wrap_if_sharded,
)
from .api import (
    auto_policy, convert_to_xla_mesh, convert_to_xla_partition_spec, xla_distribute_module,
    xla_distribute_tensor,
)


def _unavailable(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"torch_xla.distributed.spmd.{name} is not implemented in this torch_xla")
    fn.__name__ = fn.__qualname__ = name
    return fn


_NOT_BUILT = ("shard_as", "annotate_custom_sharding")
globals().update({n: _unavailable(n) for n in _NOT_BUILT})

__all__ = [
    "XLAShard", "XLAShardedTensor", "Mesh", "HybridMesh", "ShardingType", "ShardingSpec",
    "MarkShardingFunction", "mark_sharding", "mark_sharding_with_gradients", "clear_sharding",
    "get_1d_mesh", "set_global_mesh", "get_global_mesh", "wrap_as_sharded_tensor",
    "unwrap_sharded_tensor", "wrap_if_sharded", "apply_backward_optimization_barrier",
    "enable_manual_sharding", "disable_manual_sharding", "_mark_manual_sharding",
    "XLAPatchedLinear", "EinsumLinear", "xla_patched_nn_linear_forward", "apply_xla_patch_to_nn_linear",
    "auto_policy", "convert_to_xla_mesh", "convert_to_xla_partition_spec", "xla_distribute_tensor",
    "xla_distribute_module", *_NOT_BUILT,
]
