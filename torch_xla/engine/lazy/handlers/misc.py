"""Small tensor-level handlers: ops answered without a lowering."""
import torch

from ...ops.registry import HANDLERS, handler


@handler("_linalg_check_errors.default")
def _linalg_check_errors(args, kwargs):
    # PyTorch raises here when `info` reports a singular / non-PD matrix. Reading
    # `info` would sync the device on every call; like upstream XLA, results
    # carry NaN/Inf instead.
    return None


def _prims_copy_to(args, kwargs):
    # prims.copy_to(a, b): write b into a (the out= path of torch._refs decompositions)
    a, b = args[0], args[1] if len(args) > 1 else kwargs["b"]
    a.copy_(b)
    return a


def _register_prims_handlers():
    op = getattr(getattr(torch.ops.prims, "copy_to", None), "default", None)
    if op is not None:
        HANDLERS[op] = _prims_copy_to


_register_prims_handlers()
