"""torch_xla.distributed.spmd (xs): sharding annotations for SPMD.

SPMD is not built yet (see docs/ARCHITECTURE.md). The module imports, so
libraries that import it unconditionally (Hugging Face's Trainer) keep
working, and every entry point raises NotImplementedError naming itself
rather than training unsharded without saying so.
"""
import enum


def _unavailable(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"torch_xla.distributed.spmd.{name}: SPMD is not implemented in this torch_xla yet; "
            "use one process per device (torch_xla.launch / xmp.spawn / torchrun)")
    fn.__name__ = fn.__qualname__ = name
    return fn


class _Unavailable:
    def __init__(self, *args, **kwargs):
        _unavailable(type(self).__name__)()


class Mesh(_Unavailable):
    """A logical mesh of devices (not available yet)."""


class HybridMesh(Mesh):
    """A mesh over hosts and their local devices (not available yet)."""


class XLAShardedTensor(_Unavailable):
    """A tensor with its sharding (not available yet)."""


class ShardingType(enum.IntEnum):
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


_FUNCTIONS = (
    "mark_sharding", "mark_sharding_with_gradients", "clear_sharding", "get_1d_mesh",
    "wrap_if_sharded", "set_global_mesh", "get_global_mesh", "enable_manual_sharding",
    "disable_manual_sharding", "apply_backward_optimization_barrier", "shard_as",
    "annotate_custom_sharding", "xla_distribute_tensor", "xla_distribute_module",
    "auto_policy", "xla_patched_nn_linear_forward", "_mark_manual_sharding",
)
globals().update({n: _unavailable(n) for n in _FUNCTIONS})

__all__ = ["Mesh", "HybridMesh", "XLAShardedTensor", "ShardingType", *_FUNCTIONS]
