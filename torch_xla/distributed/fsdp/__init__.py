"""torch_xla.distributed.fsdp: fully sharded data parallel across processes.

What is here today: `checkpoint_module` (gradient checkpointing of a module's
forward, which upstream keeps in this package) and `utils.apply_xla_patch_to_nn_linear`.
`XlaFullyShardedDataParallel` itself is not implemented yet: constructing one
raises rather than silently training a replicated model.
"""
import functools

from ...utils.checkpoint import checkpoint

__all__ = ["XlaFullyShardedDataParallel", "checkpoint_module"]


def checkpoint_module(module):
    """Make `module`'s forward keep no activations: they are recomputed in the
    backward pass (torch_xla.utils.checkpoint, with the RNG state replayed so
    dropout draws the same masks). Keyword arguments of forward are supported.
    Returns the same module."""
    original = module.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
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


class XlaFullyShardedDataParallel:
    """Upstream's ZeRO-3 wrapper (parameters, gradients and optimizer state
    sharded over the data-parallel processes). Not implemented in this
    torch_xla yet: constructing one raises."""

    def __init__(self, module, *args, **kwargs):
        raise NotImplementedError(
            "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel is not implemented in this torch_xla yet; "
            "train data-parallel with xm.optimizer_step, or shard with SPMD (torch_xla.experimental."
            "spmd_fully_sharded_data_parallel, FSDPv2)")
