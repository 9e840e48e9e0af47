"""The collectives behind xm.all_reduce & co.: they record IR nodes (see
engine/lowering/collectives.py) that run when the step graph runs, on every
process of the job at once. With one process they are no-op copies, as upstream.
"""

import torch

from .. import runtime as xr
from ..engine import api as _api

_c = _api.collective_ops

_TYPES = {"sum": "sum", "mul": "mul", "and": "and", "or": "or", "min": "min", "max": "max"}


def _reduce_type(reduce_type):
    rt = _TYPES.get(str(reduce_type).lower())
    if rt is None:
        raise ValueError(f"torch_xla: unknown reduce type {reduce_type!r}; use xm.REDUCE_SUM/MUL/AND/OR/MIN/MAX")
    return rt


def _world():
    return xr.world_size()


def _always():
    return _api.config.read("XLA_ALWAYS_ALLREDUCE")


def _groups(groups, world=None):
    """-> tuple of tuples, or None for 'every ordinal'. Checks it is a partition."""
    if not groups:
        return None
    world = _world() if world is None else world
    gs = tuple(tuple(int(r) for r in g) for g in groups)
    size = len(gs[0])
    flat = sorted(r for g in gs for r in g)
    if any(len(g) != size for g in gs) or flat != list(range(world)):
        raise ValueError(
            f"torch_xla: groups={groups} must split the {world} ordinals into groups of equal size, "
            "each ordinal in exactly one group")
    if len(gs) == 1:
        return None
    return gs


def _group_size(groups):
    return len(groups[0]) if groups else _world()


def _check_xla(t, what):
    if not _api.is_xla_tensor(t):
        dev = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"torch_xla: {what} needs XLA tensors; got one on {dev}")


def _assign(t, new):
    if _api.tensor_aval(t) != _api.tensor_aval(new):
        raise RuntimeError(f"torch_xla: cannot write a {_api.tensor_aval(new)} result into a "
                           f"{_api.tensor_aval(t)} tensor")
    _api.assign(t, new)


def _copy_into(output, result):
    """output= arguments: write result into output (a tensor) in place."""
    if tuple(output.shape) != tuple(result.shape):
        raise RuntimeError(f"torch_xla: output has shape {list(output.shape)}, the result {list(result.shape)}")
    with torch.no_grad():
        output.copy_(result)
    return output


def _values(outs):
    return outs


# ---------------------------------------------------------------------------

def all_reduce(reduce_type, inputs, scale=1.0, groups=None):
    rt = _reduce_type(reduce_type)
    single = isinstance(inputs, torch.Tensor)
    if _world() == 1 and not _always():
        return inputs.clone() if single else inputs
    groups = _groups(groups)
    tensors = [inputs] if single else [t for t in inputs if t is not None]
    if not tensors:
        return inputs
    for t in tensors:
        _check_xla(t, "xm.all_reduce")
    outs_ = _api.trace_collective(_c.ALL_REDUCE, (list(tensors),),
                         {"reduce_type": rt, "scale": float(scale), "groups": groups})
    outs = _values(outs_)
    if single:
        return outs[0]
    for t, o in zip(tensors, outs):
        _assign(t, o)
    return inputs


def all_gather(value, dim=0, groups=None, output=None):
    if value.dim() == 0:
        value = value.reshape(1)
    if dim < 0:
        dim += value.dim()
    if _world() == 1 and not _always():
        result = value.clone()
        return _copy_into(output, result) if output is not None else result
    _check_xla(value, "xm.all_gather")
    groups = _groups(groups)
    outs_ = _api.trace_collective(_c.ALL_GATHER, (value,), {"dim": dim, "groups": groups, "count": _group_size(groups)})
    result = _values(outs_)
    return _copy_into(output, result) if output is not None else result


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None):  # noqa: A002
    rt = _reduce_type(reduce_type)
    if isinstance(input, (list, tuple)):
        outs = output if output is not None else [None] * len(input)
        return [reduce_scatter(rt, x, scale, scatter_dim, shard_count, groups, o) for x, o in zip(input, outs)]
    if scatter_dim < 0:
        scatter_dim += input.dim()
    world = _world()
    gs = _groups(groups) if world > 1 else None
    if shard_count != _group_size(gs) and not (world == 1 and shard_count == 1):
        raise ValueError(f"torch_xla: reduce_scatter shard_count={shard_count} must equal the group size "
                         f"({_group_size(gs)})")
    if input.shape[scatter_dim] % shard_count:
        raise ValueError(f"torch_xla: reduce_scatter: dimension {scatter_dim} of size {input.shape[scatter_dim]} "
                         f"does not split into {shard_count} shards")
    if world == 1 and not _always():
        result = input * scale if scale != 1.0 else input.clone()
        return _copy_into(output, result) if output is not None else result
    _check_xla(input, "xm.reduce_scatter")
    outs_ = _api.trace_collective(_c.REDUCE_SCATTER, (input,), {
        "reduce_type": rt, "scale": float(scale), "dim": scatter_dim, "shard_count": int(shard_count),
        "groups": gs})
    result = _values(outs_)
    return _copy_into(output, result) if output is not None else result


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None):
    if split_dimension < 0:
        split_dimension += value.dim()
    if concat_dimension < 0:
        concat_dimension += value.dim()
    world = _world()
    gs = _groups(groups) if world > 1 else None
    if split_count != _group_size(gs) and not (world == 1 and split_count == 1):
        raise ValueError(f"torch_xla: all_to_all split_count={split_count} must equal the group size "
                         f"({_group_size(gs)})")
    if value.shape[split_dimension] % split_count:
        raise ValueError(f"torch_xla: all_to_all: dimension {split_dimension} of size "
                         f"{value.shape[split_dimension]} does not split into {split_count}")
    if world == 1 and not _always():
        return value.clone()
    _check_xla(value, "xm.all_to_all")
    outs_ = _api.trace_collective(_c.ALL_TO_ALL, (value,), {
        "split_dim": split_dimension, "concat_dim": concat_dimension, "split_count": int(split_count),
        "groups": gs})
    return _values(outs_)


def collective_permute(value, pairs):
    pairs = tuple((int(a), int(b)) for a, b in pairs)
    world = _world()
    for a, b in pairs:
        if not (0 <= a < world and 0 <= b < world):
            raise ValueError(f"torch_xla: collective_permute pair {(a, b)} is outside ordinals 0..{world - 1}")
    if world == 1 and not _always():
        return value.clone() if (0, 0) in pairs else torch.zeros_like(value)
    _check_xla(value, "xm.collective_permute")
    outs_ = _api.trace_collective(_c.COLLECTIVE_PERMUTE, (value,), {"pairs": pairs})
    return _values(outs_)


def collective_broadcast(tensors, root_ordinal=0, groups=None):
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    if _world() == 1 and not _always():
        return
    groups = _groups(groups)
    tensors = list(tensors)
    for t in tensors:
        _check_xla(t, "xm.collective_broadcast")
    outs_ = _api.trace_collective(_c.COLLECTIVE_BROADCAST, (tensors,), {"root": int(root_ordinal), "groups": groups})
    for t, o in zip(tensors, _values(outs_)):
        _assign(t, o)


def send(value, channel_id):
    raise NotImplementedError(
        "torch_xla: xm.send/xm.recv need XLA send/recv pairs across processes, which this runtime does not "
        "expose; use xm.collective_permute(value, pairs=[(src, dst)]) instead")


def recv(output, channel_id):
    send(output, channel_id)
