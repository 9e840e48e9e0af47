"""torch_xla.distributed.fsdp: fully sharded data parallel across processes
(ZeRO-2/3), its auto-wrap policies (`wrap`), gradient checkpointing of a wrapped
submodule (`checkpoint_module`) and the consolidation of sharded checkpoints."""
import functools

import torch

from ...utils.checkpoint import checkpoint
from .state_dict_utils import consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts
from .xla_fully_sharded_data_parallel import XlaFullyShardedDataParallel

__all__ = ["XlaFullyShardedDataParallel", "consolidate_sharded_state_dicts",
           "consolidate_sharded_model_checkpoints", "checkpoint_module"]


def checkpoint_module(module):
    """Make `module`'s forward keep no activations: they are recomputed in the
    backward pass (torch_xla.utils.checkpoint, with the RNG state replayed so
    dropout draws the same masks). Keyword arguments of forward are supported.
    Wrap with checkpoint_module first, then with XlaFullyShardedDataParallel.
    Returns the same module."""
    original = module.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())):
            # reentrant checkpointing needs an input that requires grad (the first layer's
            # data does not): run it plainly, as upstream does
            return original(*args, **kwargs)
        if not kwargs:
            return checkpoint(original, *args)
        names = tuple(kwargs)
        n = len(args)

        def call(*flat):   # checkpoint passes positional tensors only: kwargs ride along by position
            return original(*flat[:n], **dict(zip(names, flat[n:])))
        call.__wrapped__ = original   # checkpoint finds the module's weights through it
        return checkpoint(call, *args, *kwargs.values())

    module._xla_checkpointed_forward_original = original
    module.forward = forward
    return module
