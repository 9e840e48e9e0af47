"""xm.optimization_barrier_: one `lax.optimization_barrier` node over a list of
tensors, written back into them in place. XLA may not move computation across
it (nor merge the recompute of a checkpointed block with the forward)."""
import torch

from ...ops.op import OpInfo
from ..tracing import trace_node, wrap


def _meta(tensors):
    return [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors]


def _lowering(tensors):
    from jax import lax
    return list(lax.optimization_barrier(tuple(tensors)))


_BARRIER = OpInfo("optimization_barrier", None, _lowering, meta=_meta)


def optimization_barrier_(tensors):
    """Pass every XLA tensor of `tensors` through one optimization barrier, in place."""
    from ..dispatch import assign_result
    from ..tensor import XLATensor
    # a view passes through as its root base (views re-derive from it); an
    # expanded view could not be written element by element anyway
    xs, seen = [], set()
    for t in tensors:
        if isinstance(t, XLATensor):
            b = t if t._xb is None else t._xb
            if id(b) not in seen:
                seen.add(id(b))
                xs.append(b)
    if not xs:
        return
    node, entry = trace_node(_BARRIER, (xs,), {})
    for t, r in zip(xs, wrap(node, entry)):
        assign_result(t, r)
    # a top-level call outside __torch_dispatch__: in eager mode it runs as one op
    from .. import mode
    if mode.current() == mode.EAGER and mode.state.depth == 0:
        mode.run_eager_op()
