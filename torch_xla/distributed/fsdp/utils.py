"""torch_xla.distributed.fsdp.utils."""
import torch


def apply_xla_patch_to_nn_linear(module, patched_function=None):
    """Replace the forward of every `nn.Linear` in `module` (itself included) by
    `patched_function` (default: torch_xla.distributed.spmd's
    `xla_patched_nn_linear_forward`). Returns the module."""
    from ..spmd import xla_sharding
    if patched_function is None:
        patched_function = xla_sharding.xla_patched_nn_linear_forward
    return xla_sharding.apply_xla_patch_to_nn_linear(module, patched_function)
