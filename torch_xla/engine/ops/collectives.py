"""Collectives as IR nodes.

Each collective is an internal op whose lowering calls lax.psum / all_gather /
psum_scatter / all_to_all / ppermute over the mesh axis of the job. The step
graph that holds one is compiled by engine/job.py as a shard_map over the 1-D
mesh of every process's device, where the lowering context binds that axis (`ctx.axis`).
Outside it the lowerings return values of the right shape computed locally
(the abstract check at tracing time, a graph run by one process), except in a
graph lowered to be printed (`ctx.dump`): there each collective is one HLO
collective over its replica groups (`replica_groups={}` for every ordinal), as
upstream prints it, through a primitive that is lowered and never run.

`groups` (a partition of the ordinals into equal-size lists) are done by
gathering over the whole axis and reducing / selecting the members of this
ordinal's group in the graph: shard_map has no sub-group collectives.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .context import ctx
from .op import OpInfo

REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")


def in_job():
    """True while a job-wide program is traced (the lowering context names an axis)."""
    return ctx.axis is not None


def _chained(prim):
    """prim(x, ...) guarded for a job whose processes run slightly different programs.

    XLA compiles each process's program as if every participant ran the same
    one. Two things break when a rank-dependent constant makes them differ:
    - XLA orders independent collectives as it likes, and two processes may
      issue them in different orders, which deadlocks over gloo;
    - XLA folds a collective of a compile-time constant (all_reduce(c) ->
      c * n), which is wrong when c differs per process.
    So every operand gets `+ z`, where z is a zero XLA cannot fold
    (0.0 * this process's index * the previous collective's first element):
    operands are never constants, and each collective depends on the one
    before it, in the graph's order. (Optimization barriers do not survive
    to scheduling.) x may be an array or a list of arrays."""
    def call(x, *args, **kwargs):
        x = _guard(x)
        out = prim(x, *args, **kwargs)
        ctx.token = _smallest(out)
        return out
    return call


def _smallest(tree):
    leaves = [a for a in jax.tree_util.tree_leaves(tree) if a.size > 0]
    return min(leaves, key=lambda a: a.size) if leaves else None


def _finite_f32(v):
    if v.dtype == jnp.bool_:
        v = v.astype(jnp.int8)
    if jnp.issubdtype(v.dtype, jnp.complexfloating):
        v = v.real
    v = v.astype(jnp.float32)
    return jnp.where(jnp.isfinite(v), v, jnp.zeros((), jnp.float32))


def _guard(x):
    zero = lax.axis_index(ctx.axis).astype(jnp.float32) * jnp.float32(0)
    if ctx.token is not None:
        zero = zero + _finite_f32(ctx.token.reshape(-1)[0]) * jnp.float32(0)

    def dep(a):
        if a.dtype == jnp.bool_:
            return jnp.logical_or(a, zero != 0)
        if jnp.issubdtype(a.dtype, jnp.integer):
            return a + zero.astype(jnp.int32).astype(a.dtype)
        return a + zero.astype(a.dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(dep(a) for a in x)
    return dep(x)


_psum = _chained(lax.psum)
_pmax = _chained(lax.pmax)
_pmin = _chained(lax.pmin)
_all_gather = _chained(lax.all_gather)
_psum_scatter = _chained(lax.psum_scatter)
_all_to_all = _chained(lax.all_to_all)
_ppermute = _chained(lax.ppermute)


# ---------------------------------------------------------------------------
# group tables (static, part of the op's key)

def group_tables(groups, n):
    """groups (tuple of tuples) -> (members[n, g], position[n]) as numpy."""
    members = np.zeros((n, len(groups[0])), np.int32)
    position = np.zeros((n,), np.int32)
    for grp in groups:
        for p, r in enumerate(grp):
            members[r] = grp
            position[r] = p
    return members, position


def _identity(op, dtype):
    dt = np.dtype(dtype)
    if op == "sum" or op == "or":
        return np.zeros((), dt)
    if op == "mul":
        return np.ones((), dt)
    if op == "and":
        if dt == np.bool_:
            return np.array(True)
        if np.issubdtype(dt, np.integer):
            return np.array(np.iinfo(dt).max if np.issubdtype(dt, np.unsignedinteger) else -1, dt)
        raise TypeError(f"REDUCE_AND needs an integer or bool tensor, got {dt}")
    if op == "max":
        if dt == np.bool_:
            return np.array(False)
        if np.issubdtype(dt, np.integer):
            return np.array(np.iinfo(dt).min, dt)
        return np.array(-np.inf, dt)
    if op == "min":
        if dt == np.bool_:
            return np.array(True)
        if np.issubdtype(dt, np.integer):
            return np.array(np.iinfo(dt).max, dt)
        return np.array(np.inf, dt)
    raise ValueError(f"unknown reduce type {op!r}")


_COMBINE = {"sum": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min,
            "and": lax.bitwise_and, "or": lax.bitwise_or}


def _gathered_reduce(x, op, groups):
    """Reduce x over this ordinal's group by gathering the whole axis."""
    g = _all_gather(x, ctx.axis)  # (n, *x.shape)
    n = g.shape[0]
    if groups is None:
        mask = np.ones((n, n), bool)
    else:
        mask = np.zeros((n, n), bool)
        for grp in groups:
            for r in grp:
                mask[r, list(grp)] = True
    row = jnp.asarray(mask)[lax.axis_index(ctx.axis)]
    row = row.reshape((n,) + (1,) * x.ndim)
    ident = _identity(op, x.dtype)
    vals = jnp.where(row, g, ident.astype(x.dtype))
    if op == "sum" and x.dtype == jnp.bool_:
        op = "or"
    return lax.reduce(vals, ident.astype(x.dtype), _COMBINE[op], (0,))


def reduce_value(x, op, groups):
    if groups is None and op in ("sum", "max", "min"):
        if x.dtype == jnp.bool_:
            y = x.astype(jnp.int32)
            fn = _pmax if op in ("sum", "max") else _pmin
            return fn(y, ctx.axis).astype(jnp.bool_)
        if op == "sum":
            return _psum(x, ctx.axis)
        return (_pmax if op == "max" else _pmin)(x, ctx.axis)
    return _gathered_reduce(x, op, groups)


def _scaled(x, scale):
    if scale == 1.0:
        return x
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return x * jnp.asarray(scale, x.dtype)
    return (x * scale).astype(x.dtype)


# ---------------------------------------------------------------------------
# all_reduce (a list of tensors: one node, many outputs)

def _all_reduce_lowering(xs, *, reduce_type, scale, groups):
    if not in_job():
        if ctx.dump:
            return [_scaled(y, scale) for y in _dump_all_reduce(list(xs), reduce_type, groups)]
        return [_scaled(x, scale) for x in xs]
    if groups is None and reduce_type == "sum" and all(x.dtype != jnp.bool_ for x in xs):
        return [_scaled(y, scale) for y in _psum(list(xs), ctx.axis)]  # one all-reduce
    return [_scaled(reduce_value(x, reduce_type, groups), scale) for x in xs]


def _all_reduce_meta(xs, *, reduce_type, scale, groups):
    return [torch.empty_like(x) for x in xs]


ALL_REDUCE = OpInfo("xla_all_reduce", None, _all_reduce_lowering, meta=_all_reduce_meta)


# ---------------------------------------------------------------------------
# all_gather

def _all_gather_lowering(x, *, dim, groups, count):
    if not in_job():
        if ctx.dump:
            return _dump("all_gather", [x], groups, dim=dim, count=count)[0]
        return jnp.concatenate([x] * count, axis=dim)
    if groups is None:
        return _all_gather(x, ctx.axis, axis=dim, tiled=True)
    members, _ = group_tables(groups, ctx.size)
    g = _all_gather(x, ctx.axis)
    sel = jnp.take(g, jnp.asarray(members)[lax.axis_index(ctx.axis)], axis=0)
    return jnp.concatenate([sel[k] for k in range(members.shape[1])], axis=dim)


def _all_gather_meta(x, *, dim, groups, count):
    shape = list(x.shape)
    shape[dim] *= count
    return x.new_empty(shape)


ALL_GATHER = OpInfo("xla_all_gather", None, _all_gather_lowering, meta=_all_gather_meta)


# all_gather of several tensors in one collective (one node, many outputs)

def _all_gather_coalesced_lowering(xs, *, dim, groups, count):
    if not in_job() and ctx.dump:
        return _dump("all_gather", list(xs), groups, dim=dim, count=count)
    return [_all_gather_lowering(x, dim=dim, groups=groups, count=count) for x in xs]


def _all_gather_coalesced_meta(xs, *, dim, groups, count):
    return [_all_gather_meta(x, dim=dim, groups=groups, count=count) for x in xs]


ALL_GATHER_COALESCED = OpInfo("xla_all_gather_coalesced", None, _all_gather_coalesced_lowering,
                              meta=_all_gather_coalesced_meta)


# ---------------------------------------------------------------------------
# reduce_scatter (one tensor per node)

def _reduce_scatter_lowering(x, *, reduce_type, scale, dim, shard_count, groups):
    size = x.shape[dim] // shard_count
    if not in_job():
        if ctx.dump:
            _check_reducible(reduce_type, x.dtype)
            y, = _dump("reduce_scatter", [x], groups, reduce=_dump_reducer(reduce_type, x.dtype),
                       dim=dim, count=shard_count)
            return _scaled(y, scale)
        return _scaled(lax.slice_in_dim(x, 0, size, axis=dim), scale)
    if groups is None and reduce_type == "sum" and x.dtype != jnp.bool_:
        return _scaled(_psum_scatter(x, ctx.axis, scatter_dimension=dim, tiled=True), scale)
    full = reduce_value(x, reduce_type, groups)
    if groups is None:
        pos = lax.axis_index(ctx.axis)
    else:
        _, position = group_tables(groups, ctx.size)
        pos = jnp.asarray(position)[lax.axis_index(ctx.axis)]
    return _scaled(lax.dynamic_slice_in_dim(full, pos * size, size, axis=dim), scale)


def _reduce_scatter_meta(x, *, reduce_type, scale, dim, shard_count, groups):
    shape = list(x.shape)
    shape[dim] //= shard_count
    return x.new_empty(shape)


REDUCE_SCATTER = OpInfo("xla_reduce_scatter", None, _reduce_scatter_lowering, meta=_reduce_scatter_meta)


# ---------------------------------------------------------------------------
# all_to_all

def _all_to_all_lowering(x, *, split_dim, concat_dim, split_count, groups):
    chunk = x.shape[split_dim] // split_count
    if not in_job():
        if ctx.dump:
            # XLA's all-to-all names its group (empty replica groups do not convert)
            groups = groups if groups is not None else (tuple(range(split_count)),)
            return _dump("all_to_all", [x], groups, dim=split_dim, dim2=concat_dim, count=split_count)[0]
        piece = lax.slice_in_dim(x, 0, chunk, axis=split_dim)
        return jnp.concatenate([piece] * split_count, axis=concat_dim)
    if groups is None:
        return _all_to_all(x, ctx.axis, split_dim, concat_dim, tiled=True)
    members, position = group_tables(groups, ctx.size)
    me = lax.axis_index(ctx.axis)
    g = _all_gather(x, ctx.axis)
    sel = jnp.take(g, jnp.asarray(members)[me], axis=0)
    pos = jnp.asarray(position)[me]
    pieces = [lax.dynamic_slice_in_dim(sel[k], pos * chunk, chunk, axis=split_dim)
              for k in range(members.shape[1])]
    return jnp.concatenate(pieces, axis=concat_dim)


def _all_to_all_meta(x, *, split_dim, concat_dim, split_count, groups):
    shape = list(x.shape)
    shape[split_dim] //= split_count
    shape[concat_dim] *= split_count
    return x.new_empty(shape)


ALL_TO_ALL = OpInfo("xla_all_to_all", None, _all_to_all_lowering, meta=_all_to_all_meta)


# ---------------------------------------------------------------------------
# collective_permute

def _permute_lowering(x, *, pairs):
    if not in_job():
        if ctx.dump:
            return _dump("collective_permute", [x], None, pairs=tuple(tuple(p) for p in pairs))[0]
        return x
    return _ppermute(x, ctx.axis, perm=list(pairs))


def _permute_meta(x, *, pairs):
    return torch.empty_like(x)


COLLECTIVE_PERMUTE = OpInfo("xla_collective_permute", None, _permute_lowering, meta=_permute_meta)


# ---------------------------------------------------------------------------
# collective_broadcast (a list of tensors: each takes root's value)

def _broadcast_lowering(xs, *, root, groups):
    if not in_job():
        if ctx.dump:  # upstream's form: root's values, zeros elsewhere, summed
            me, = _dump("replica_id", [], None)
            keep = me == jnp.asarray(root, me.dtype)
            masked = [lax.select(jnp.broadcast_to(keep, x.shape), x, jnp.zeros(x.shape, x.dtype)) for x in xs]
            return _dump_all_reduce(masked, "sum", groups)
        return list(xs)
    me = lax.axis_index(ctx.axis)
    out = []
    for x in xs:
        if x.dtype == jnp.bool_:
            y = jnp.where(me == root, x, False).astype(jnp.int8)
            out.append(reduce_value(y, "sum", groups).astype(jnp.bool_))
        else:
            y = jnp.where(me == root, x, jnp.zeros((), x.dtype))
            out.append(reduce_value(y, "sum", groups))
    return out


def _broadcast_meta(xs, *, root, groups):
    return [torch.empty_like(x) for x in xs]


COLLECTIVE_BROADCAST = OpInfo("xla_collective_broadcast", None, _broadcast_lowering, meta=_broadcast_meta)


COLLECTIVE_OPS = frozenset([ALL_REDUCE, ALL_GATHER, ALL_GATHER_COALESCED, REDUCE_SCATTER, ALL_TO_ALL,
                            COLLECTIVE_PERMUTE, COLLECTIVE_BROADCAST])


# ---------------------------------------------------------------------------
# dumps: HLO collectives with explicit replica groups (lowered, never run)

_DUMP_PRIM = None
# reducer of each reduce type; bool tensors reduce with the logical ops
_REDUCERS = {"sum": "add", "mul": "multiply", "max": "maximum", "min": "minimum", "and": "and", "or": "or"}
_BOOL_REDUCERS = {"sum": "or", "mul": "and", "max": "or", "min": "and", "and": "and", "or": "or"}


def _check_reducible(op, dtype):
    if op in ("and", "or") and not (dtype == jnp.bool_ or jnp.issubdtype(dtype, jnp.integer)):
        raise TypeError(f"REDUCE_{op.upper()} needs an integer or bool tensor, got {np.dtype(dtype)}")


def _dump_reducer(op, dtype):
    return (_BOOL_REDUCERS if dtype == jnp.bool_ else _REDUCERS)[op]


def _dump_all_reduce(xs, op, groups):
    """One HLO all-reduce per dtype among xs (a reduction region has one element type)."""
    by_dtype = {}
    for i, x in enumerate(xs):
        _check_reducible(op, x.dtype)
        by_dtype.setdefault(np.dtype(x.dtype), []).append(i)
    out = [None] * len(xs)
    for dt, idx in by_dtype.items():
        ys = _dump("all_reduce", [xs[i] for i in idx], groups, reduce=_dump_reducer(op, dt))
        for i, y in zip(idx, ys):
            out[i] = y
    return out


def _dump(kind, xs, groups, reduce=None, dim=0, dim2=0, count=1, pairs=()):
    """Bind the dump primitive: `kind` over xs with `groups` (None: every ordinal)."""
    groups = () if groups is None else tuple(tuple(int(r) for r in g) for g in groups)
    return _dump_primitive().bind(*xs, kind=kind, groups=groups, reduce=reduce, dim=dim, dim2=dim2,
                                  count=count, pairs=pairs)


def _dump_primitive():
    global _DUMP_PRIM
    if _DUMP_PRIM is None:
        from jax.extend.core import Primitive
        from jax.interpreters import mlir
        prim = Primitive("xla_collective")
        prim.multiple_results = True
        prim.def_abstract_eval(_dump_abstract_eval)
        mlir.register_lowering(prim, _dump_mlir_lowering)
        _DUMP_PRIM = prim
    return _DUMP_PRIM


def _dump_out_shapes(shapes, kind, dim, dim2, count):
    out = []
    for shape in shapes:
        shape = list(shape)
        if kind == "all_gather":
            shape[dim] *= count
        elif kind == "reduce_scatter":
            shape[dim] //= count
        elif kind == "all_to_all":
            shape[dim] //= count
            shape[dim2] *= count
        out.append(tuple(shape))
    return out


def _dump_abstract_eval(*avals, kind, groups, reduce, dim, dim2, count, pairs):
    try:
        from jax.core import ShapedArray
    except ImportError:  # a JAX that keeps it private
        from jax._src.core import ShapedArray
    if kind == "replica_id":
        return [ShapedArray((), np.uint32)]
    shapes = _dump_out_shapes([a.shape for a in avals], kind, dim, dim2, count)
    return [ShapedArray(s, a.dtype) for s, a in zip(shapes, avals)]


def _dump_mlir_lowering(lctx, *xs, kind, groups, reduce, dim, dim2, count, pairs):
    from jax.interpreters import mlir
    from jaxlib.mlir.dialects import stablehlo as hlo
    ir = mlir.ir

    def tensor_type(shape, dtype):
        return ir.RankedTensorType.get(list(shape), mlir.dtype_to_ir_type(np.dtype(dtype)))

    def dense(rows, width):
        a = np.asarray(rows, np.int64).reshape(len(rows), width) if rows else np.zeros((0, 0), np.int64)
        return ir.DenseIntElementsAttr.get(np.ascontiguousarray(a))

    if kind == "replica_id":
        return [hlo.ReplicaIdOp().result]
    avals = lctx.avals_in
    out_types = [tensor_type(a.shape, a.dtype) for a in lctx.avals_out]
    replica_groups = dense(groups, len(groups[0]) if groups else 0)
    if kind == "all_gather":
        return list(hlo.AllGatherOp(out_types, list(xs), all_gather_dim=mlir.i64_attr(dim),
                                    replica_groups=replica_groups).results)
    if kind == "all_to_all":
        return list(hlo.AllToAllOp(list(xs), split_dimension=mlir.i64_attr(dim),
                                   concat_dimension=mlir.i64_attr(dim2), split_count=mlir.i64_attr(count),
                                   replica_groups=replica_groups).results)
    if kind == "collective_permute":
        return [hlo.CollectivePermuteOp(xs[0], source_target_pairs=dense(pairs, 2)).result]
    if kind == "all_reduce":
        op = hlo.AllReduceOp(out_types, list(xs), replica_groups=replica_groups)
    elif kind == "reduce_scatter":
        op = hlo.ReduceScatterOp(out_types[0], xs[0], scatter_dimension=mlir.i64_attr(dim),
                                 replica_groups=replica_groups)
    else:
        raise ValueError(f"unknown collective {kind!r}")
    scalar = tensor_type((), avals[0].dtype)
    block = op.regions[0].blocks.append(scalar, scalar)
    combine = {"add": hlo.AddOp, "multiply": hlo.MulOp, "maximum": hlo.MaxOp, "minimum": hlo.MinOp,
               "and": hlo.AndOp, "or": hlo.OrOp}[reduce]
    with ir.InsertionPoint(block):
        hlo.ReturnOp([combine(*block.arguments).result])
    return list(op.results)


def describe(entry):
    """A short text for one collective node (for hang reports)."""
    kw = entry.kwtemplate or {}
    name = entry.info.name.replace("xla_", "")
    bits = []
    if "reduce_type" in kw:
        bits.append(kw["reduce_type"])
    if kw.get("groups") is not None:
        bits.append(f"groups={[list(g) for g in kw['groups']]}")
    if "pairs" in kw:
        bits.append(f"pairs={[list(p) for p in kw['pairs']]}")
    shapes = ", ".join(f"{str(d).replace('torch.', '')}{list(s)}" for s, d in entry.in_avals[:3])
    if len(entry.in_avals) > 3:
        shapes += f", ... ({len(entry.in_avals)} tensors)"
    return f"{name}({', '.join(bits + [shapes]) if bits else shapes})"


