"""Small tensor-level handlers: ops answered without a lowering."""
import math

import torch

from ...ops.registry import HANDLERS, handler
from ..state import base_of


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


@handler("_has_same_storage_numel.default")
def _has_same_storage_numel(args, kwargs):
    # Tensor._view_func(new_base) asks this before replaying a view chain on a new
    # base. A lazy tensor's storage is its root base: compare their sizes from
    # the avals rather than falling back to the CPU (which would run the graph). A view's storage is its base's.
    def storage_numel(t):
        return math.prod(base_of(t).aval[0])
    a, b = args[0], args[1] if len(args) > 1 else kwargs["other"]
    return storage_numel(a) == storage_numel(b)
