"""xm.optimization_barrier_: one `lax.optimization_barrier` node over a list of
tensors, written back into them in place. XLA may not move computation across
it (nor merge the recompute of a checkpointed block with the forward)."""
import torch
from jax import lax

from ...ops.op import OpInfo
from .. import eager, state
from ..tensor import XLATensor
from ..tracing import ValueArg, trace_node


def _meta(tensors):
    return [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors]


def _lowering(tensors):
    return list(lax.optimization_barrier(tuple(tensors)))


_BARRIER = OpInfo("optimization_barrier", None, _lowering, meta=_meta)


def optimization_barrier_(tensors):
    """Pass every XLA tensor of `tensors` through one optimization barrier, in place."""
    # a view passes through as its base's storage (views re-derive from it); an
    # expanded view could not be written element by element anyway
    bases, seen = [], set()
    for t in tensors:
        if isinstance(t, XLATensor):
            b = state.base_of(t)
            if id(b) not in seen:
                seen.add(id(b))
                bases.append(b)
    if not bases:
        return
    values = [b.value for b in bases]
    node, entry = trace_node(_BARRIER, ([ValueArg(v, b.aval) for v, b in zip(values, bases)],), {})
    for k, b in enumerate(bases):
        b.write((node, k))
    # a top-level call outside __torch_dispatch__: in eager mode it runs as one op
    eager.run_if_top_level()
