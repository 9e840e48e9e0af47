"""Deferred index checks: out-of-range indices raise IndexError, with no extra sync.

Eager PyTorch raises when an index is out of range; XLA clamps (gathers) or
drops (scatters) silently. Checking on the host would read the device every
step. Instead, tracing an indexing op also traces a one-value flag, "every
index of this op is in range", kept here as pending. The next barrier runs the
flags as extra outputs of its graph; they are read where the host waits anyway:
the next host read (`.item()`, `.cpu()`, print), `xm.wait_device_ops()`, or a
later barrier once they are ready. A false flag raises IndexError naming the
aten op, the index shape, the dimension size and the user's line.

Which ops, and which of their arguments are indices, is the table `CHECKS`
(aten overload -> function(args, kwargs) -> [(index, size, negative_ok,
ignore, dim)]). XLA_CHECK_INDICES=0 turns the checks off: gathers then clamp and
scatters drop out-of-range writes, the same in every op.
"""
import jax.numpy as jnp
import numpy as np
import torch

from ..base import config, frames
from ..ops.op import OpInfo
from .tracing import trace_node

aten = torch.ops.aten
ENABLED = config.read("XLA_CHECK_INDICES")   # read once; config.override refreshes it


def _refresh_enabled():
    global ENABLED
    ENABLED = config.read("XLA_CHECK_INDICES")


config.on_override("XLA_CHECK_INDICES", _refresh_enabled)

_pending = []      # [(value, info)]: flags traced since the last barrier
_unverified = []   # [(jax.Array, info)]: flags computed, not read yet


def _lowering(idx, *, size, negative_ok, ignore):
    lo = -size if negative_ok else 0
    ok = (idx >= lo) & (idx < size)
    if ignore is not None:
        ok = ok | (idx == ignore)
    return jnp.all(ok)


def _meta(idx, *, size, negative_ok, ignore):
    return torch.empty((), dtype=torch.bool, device="meta")


_CHECK = OpInfo("index_in_range", None, _lowering, meta=_meta)


def _count_lowering(mask, *, n):
    return jnp.sum(mask.reshape(-1).astype(jnp.int64)) == n


def _count_meta(mask, *, n):
    return torch.empty((), dtype=torch.bool, device="meta")


# a boolean mask selects as many elements as a value of n rows written through it
_COUNT = OpInfo("mask_count_is", None, _count_lowering, meta=_count_meta)


def _int_index(t):
    return isinstance(t, torch.Tensor) and t.dtype in (torch.int64, torch.int32, torch.int16, torch.int8) \
        and t.device.type == "xla" and t.numel() > 0


def _dim_size(x, dim):
    return x.shape[dim % x.dim()] if x.dim() else 1


def _advanced(args, kwargs):
    x, indices = args[0], args[1]
    out, d = [], 0
    shapes, kept = [], 1
    for i in indices:
        if i is None:
            if d < x.dim():
                kept *= x.shape[d]
            d += 1
        elif i.dtype in (torch.bool, torch.uint8):
            d += i.dim()
        else:
            shapes.append(tuple(i.shape))
            if _int_index(i) and d < x.dim():
                out.append((i, x.shape[d], True, None, d))
            d += 1
    for k in range(d, x.dim()):
        kept *= x.shape[k]
    if out:
        # an empty result reads nothing: eager checks no index then
        try:
            n = 1
            for s in torch.broadcast_shapes(*shapes):
                n *= s
        except RuntimeError:
            n = 1
        if n == 0 or kept == 0:
            return []
    return out


def _along(pos_index, negative_ok=False):
    def spec(args, kwargs):
        x, dim, index = args[0], args[1], args[pos_index]
        return [(index, _dim_size(x, dim), negative_ok, None, dim % max(x.dim(), 1))] if _int_index(index) else []
    return spec


def _embedding(args, kwargs):
    weight, indices = args[0], args[1]
    return [(indices, weight.shape[0], False, None, 0)] if _int_index(indices) else []


def _take(args, kwargs):
    x, index = args[0], args[1]
    return [(index, x.numel(), True, None, 0)] if _int_index(index) else []


def _nll(args, kwargs):
    x, target = args[0], args[1]
    ignore = args[4] if len(args) > 4 else kwargs.get("ignore_index", -100)
    c = x.shape[1] if x.dim() > 1 else x.shape[0]
    return [(target, c, False, int(ignore), 1 if x.dim() > 1 else 0)] if _int_index(target) else []


def _masked_write(args, kwargs):
    """x[mask] = values with a leading boolean mask on the device, the one masked
    write that reads no mask on the host (handlers/data_dependent.py): the value's
    rows along the mask's result dimension must be 1 or as many as the mask
    selects, which only the data tells; -> [(mask, rows, 0, value shape)] when
    they are more than 1."""
    x, indices, values = args[0], args[1], args[2]
    if not indices or not isinstance(values, torch.Tensor) or any(i is not None for i in indices[1:]):
        return []
    mask = indices[0]
    if mask is None or mask.dtype != torch.bool or mask.device.type != "xla":
        return []
    pos = values.dim() - (x.dim() - mask.dim()) - 1   # the value's dim aligned with the count
    if pos < 0 or values.shape[pos] == 1:
        return []
    return [(mask, values.shape[pos], 0, tuple(values.shape))]


CHECKS = {}
COUNTS = {aten.index_put.default: _masked_write, aten._index_put_impl.default: _masked_write}


def _register(spec, *ops):
    for op in ops:
        if op is not None:
            CHECKS[op] = spec


_register(_advanced, aten.index.Tensor, aten.index_put.default, aten._index_put_impl.default)
_register(_along(2), aten.index_select.default, aten.gather.default, aten.index_add.default,
          aten.index_copy.default, aten.index_fill.int_Scalar, aten.index_fill.int_Tensor,
          aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
          aten.scatter_add.default, aten.scatter_reduce.two)
_register(_embedding, aten.embedding.default)
_register(_take, aten.take.default)
_register(_nll, aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)


def wrap(func, h):
    """The handler of `func`, recording its index checks first (when it has any)."""
    spec = CHECKS.get(func)
    if spec is None:
        return h
    counts = COUNTS.get(func)
    name = func._schema.name.split("::")[-1]

    def checked(args, kwargs):
        if not ENABLED:  # looked up per call: config.override(XLA_CHECK_INDICES=...) switches it at run time
            return h(args, kwargs)
        for idx, size, negative_ok, ignore, dim in spec(args, kwargs):
            node, _ = trace_node(_CHECK, (idx,), {"size": int(size), "negative_ok": negative_ok, "ignore": ignore})
            _pending.append(((node, 0), ("range", name, tuple(idx.shape), dim, int(size), frames.user_src(2))))
        if counts is not None:
            for mask, n, dim, shape in counts(args, kwargs):
                node, _ = trace_node(_COUNT, (mask,), {"n": int(n)})
                _pending.append(((node, 0), ("count", name, shape, dim, int(n), frames.user_src(2))))
        return h(args, kwargs)
    return checked


def mark():
    """Where the flags traced from now on start (for take_since)."""
    return len(_pending)


def take_since(n):
    """Take the flags traced since mark() returned n: -> [(value, info)]. A
    captured function's body computes its own flags; each call gives them back
    (add)."""
    out = _pending[n:]
    del _pending[n:]
    return out


def add(values, infos):
    """Pending flags computed by a node (values: IR values of 0-dim bools)."""
    _pending.extend(zip(values, infos))


def take_pending(graph, full):
    """The flags to add to a graph as outputs: every pending one at a full barrier,
    else those whose index the graph computes anyway."""
    if not _pending:
        return [], []
    if full:
        chosen = _pending[:]
        _pending.clear()
    else:
        pos = graph.pos
        chosen = [c for c in _pending if id(c[0][0].operands[0][0]) in pos]
        if not chosen:
            return [], []
        keep = set(id(c[0][0]) for c in chosen)
        _pending[:] = [c for c in _pending if id(c[0][0]) not in keep]
    return [c[0] for c in chosen], [c[1] for c in chosen]


def deliver(arrays, infos):
    _unverified.extend(zip(arrays, infos))


def verify(block):
    """Read the computed flags (only those ready unless `block`); raise for the first false one."""
    if not _unverified:
        return
    bad = None
    n = 0
    # flags come from runs on one device, which finish in launch order: the first
    # one not ready ends the scan (steps queued far ahead leave many pending)
    for arr, info in _unverified:
        try:
            if not (block or arr.is_ready()):
                break
        except Exception:  # noqa: BLE001 - deleted: nothing to check
            n += 1
            continue
        n += 1
        if bad is None and not bool(np.asarray(arr)):
            bad = info
    del _unverified[:n]
    if bad is not None:
        _unverified.clear()
        kind, name, shape, dim, size, src = bad
        at = f" (traced at {src[1]}:{src[2]} in {src[0]})" if src else ""
        if kind == "count":
            raise RuntimeError(
                f"torch_xla: shape mismatch in aten::{name}: value tensor of shape {list(shape)} cannot be "
                f"broadcast to the indexing result: the boolean mask selects other than {size} elements "
                f"along dimension {dim}{at}. The results of that step are invalid.")
        raise IndexError(
            f"torch_xla: index out of range in aten::{name}: an index of shape {list(shape)} into "
            f"dimension {dim} of size {size}{at}. The results of that step are invalid. "
            "(XLA_CHECK_INDICES=0 turns this check off: out-of-range reads then clamp.)")


def reset():
    _pending.clear()
    _unverified.clear()
