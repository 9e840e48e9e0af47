"""Graphs kept by hash and run on inputs the caller lines up: upstream's
dynamo-bridge primitives (`_get_tensors_xla_device_data_node`,
`_xla_warm_up_cache`, `_run_cached_graph`, `GraphInputMatcher`).

Our own bridge replays through `replay.Step`; these exist for code written
against upstream's lower-level API. A cached graph's outputs are the distinct
pending values of the tensors it was warmed up with (device data and repeats
are not outputs, as upstream); its inputs are its data leaves in graph order,
and `run(hash, tensors)` binds the caller's tensors to them positionally.
Random ops in such a graph keep the seed they were traced with: upstream's
seed slot (`SEED_INFO_ID`) is a tensor id no tensor has here.
"""
import collections
import itertools

from ..base import metrics
from ..ir import node as ir
from ..ir.graph import Graph, xla_shape
from . import executor, launch, state
from .state import Base, value_of
from .tensor import XLATensor, live_tensors, new_base
from .transfers import stored_array, upload_array

SEED_INFO_ID = -127389   # upstream's id of the base-seed graph input
_ids = itertools.count(1)
_by_hash = collections.OrderedDict()   # graph hash text -> Graph
_MAX_GRAPHS = 1024


def tensor_id(t):
    """A unique, stable id of XLA tensor t (upstream's XLATensor id)."""
    i = t.__dict__.get("_xla_tensor_id")
    if i is None:
        i = next(_ids)
        t._xla_tensor_id = i
    return i


def _owners():
    """data node id -> the live base tensor holding it (one with an id first)."""
    out = {}
    for t in live_tensors():
        s = t._lazy
        if type(s) is not Base or s.value[0].kind != ir.DATA:
            continue
        k = id(s.value[0])
        prev = out.get(k)
        if prev is None or ("_xla_tensor_id" not in prev.__dict__ and "_xla_tensor_id" in t.__dict__):
            out[k] = t
    return out


def graph_inputs(tensors):
    """-> (tensor ids, tensors) of the device-data inputs of the graph computing
    `tensors`, in the graph's order."""
    g = Graph.capture(executor.pending_roots(list(tensors)))
    owners = _owners()
    ids, vals = [], []
    for p in g.params:
        t = owners.get(id(p))
        if t is None:   # data no live tensor holds (a constant the trace made)
            t = new_base((p, 0), p.entry)
        ids.append(tensor_id(t))
        vals.append(t)
    return ids, vals


def _outputs(tensors):
    roots, seen = [], set()
    for t in tensors:
        v = value_of(t)
        if v[0].kind != ir.OP or (id(v[0]), v[1]) in seen:
            continue
        seen.add((id(v[0]), v[1]))
        roots.append(v)
    return roots


def warm_up(tensors, graph_hash):
    """Compile (without running) the graph of `tensors`' pending values and keep
    it under `graph_hash`, the hash `_get_graph_hash(tensors)` gave."""
    tensors = list(tensors)
    roots = _outputs(tensors)
    if not roots:
        return
    g = Graph.capture(roots)
    launch.prepare(g, g.param_arrays() + launch.upload_pools(g.pool_arrays(), 0), reason="cached graph")
    _by_hash[graph_hash] = g
    _by_hash.move_to_end(graph_hash)
    if len(_by_hash) > _MAX_GRAPHS:
        _by_hash.popitem(last=False)


def run(graph_hash, tensors):
    """Run the graph kept under `graph_hash` with `tensors` (XLA or CPU) bound to
    its inputs in order; -> its outputs as new XLA tensors."""
    g = _by_hash.get(graph_hash)
    if g is None:
        raise RuntimeError(f"torch_xla: no cached graph with hash {graph_hash}: "
                           "call torch_xla._XLAC._xla_warm_up_cache(tensors, []) on its outputs first")
    tensors = list(tensors)
    if len(tensors) != len(g.params):
        raise ValueError(f"torch_xla: the cached graph {graph_hash} takes {len(g.params)} inputs "
                         f"({', '.join(xla_shape(*p.entry) for p in g.params)}), got {len(tensors)}")
    arrays = []
    for k, (t, p) in enumerate(zip(tensors, g.params)):
        if (tuple(t.shape), t.dtype) != tuple(p.entry):
            raise ValueError(f"torch_xla: input {k} of the cached graph {graph_hash} is "
                             f"{xla_shape(*p.entry)}, got {xla_shape(tuple(t.shape), t.dtype)}")
        arrays.append(stored_array(t) if isinstance(t, XLATensor) else upload_array(t.contiguous()))
    metrics.value_metric("RunCachedGraphInputData", len(tensors))
    outs = launch.launch(g, arrays, g.pool_arrays(), reason="cached graph", donors=[None] * len(arrays))
    metrics.value_metric("RunCachedGraphOutputData", len(outs))
    avals = [node.entry.out_avals[i] for node, i in g.roots]
    return [new_base((ir.result_node(a, *aval), 0), aval) for a, aval in zip(outs, avals)]


def clear_pending():
    """Drop every live tensor's pending IR (upstream's `_clear_pending_irs`): each
    becomes a placeholder of its shape, so the next barrier runs nothing and
    reading it is an error, until it is written again."""
    for r in list(state.pending):
        b = r()
        if b is not None:
            b.forget_pending()
