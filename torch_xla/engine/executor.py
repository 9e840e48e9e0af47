"""Barriers: turning pending IR into device data.

sync() takes every live tensor with pending IR (or just the ones a host read
needs), orders the graph, and keys it by structure: each op node's hash plus
the positions of its operands, so two graphs share an executable exactly when
they compute the same thing from inputs of the same avals. A miss replays the
graph through the lowerings inside jax.jit and compiles it; a hit only feeds
the new inputs. Inputs are device data leaves and one array per scalar dtype
pool. Buffers that a full barrier overwrites (a parameter updated in place)
are donated. Execution is asynchronous: outputs become the tensors' data as
futures, and only host reads wait.
"""
import collections
import os
import threading
import time

import jax
import numpy as np

from . import ir, metrics, tensor
from . import debug_analysis as _dbg
from .runtime import jax_device
from .tracing import apply_entry

_lock = threading.RLock()
_cache = collections.OrderedDict()
CACHE_SIZE = int(os.environ.get("XLA_COMPILATION_CACHE_SIZE", "2048"))
_donate_ok = os.environ.get("XLA_ENABLE_PARAM_ALIASING", "1") != "0"
last_graph_info = {}
step_closures = []


class Executable:
    __slots__ = ("compiled", "n_out", "hash", "donated", "n_params")


def _collect(root_values):
    """Post-order walk. -> (order, pos, params, scalars, sig)."""
    pos = {}
    order = []
    params = []
    scalars = []
    sig = []
    OP = ir.OP
    DATA = ir.DATA
    for rv in root_values:
        root = rv[0]
        if id(root) in pos:
            continue
        if root.kind != OP:
            pos[id(root)] = len(pos)
            if root.kind == DATA:
                params.append(root)
            else:
                scalars.append(root)
            sig.append(root.hash)
            continue
        stack = [[root, 0]]
        while stack:
            top = stack[-1]
            node = top[0]
            operands = node.operands
            i = top[1]
            if i < len(operands):
                top[1] = i + 1
                child = operands[i][0]
                if id(child) in pos:
                    continue
                if child.kind == OP:
                    stack.append([child, 0])
                else:
                    pos[id(child)] = len(pos)
                    if child.kind == DATA:
                        params.append(child)
                    else:
                        scalars.append(child)
                    sig.append(child.hash)
            else:
                stack.pop()
                pos[id(node)] = len(pos)
                order.append(node)
                sig.append(node.hash)
                for v in operands:
                    sig.append(pos[id(v[0])] * 16 + v[1])
    for rv in root_values:
        sig.append(pos[id(rv[0])] * 16 + rv[1])
    return order, pos, params, scalars, sig


op_scope = None  # node -> jax.named_scope name for every compiled graph (set by XLA_HLO_DEBUG)


def _build_fn(order, pos, params, scalars, root_values, scope_of=None):
    """A Python function replaying the graph on JAX values (traced once by jit).
    With scope_of(node) -> str, each op is traced under that jax.named_scope
    (XLA_HLO_DEBUG puts the aten op and the user's line in HLO metadata)."""
    pools = sorted({s.entry for s in scalars})
    pool_index = {p: i for i, p in enumerate(pools)}
    counts = collections.Counter()
    scalar_slots = []
    for s in scalars:
        scalar_slots.append((pos[id(s)], pool_index[s.entry], counts[s.entry]))
        counts[s.entry] += 1
    param_slots = [pos[id(p)] for p in params]
    scope_of = scope_of or op_scope
    plan = [(pos[id(n)], n.entry, tuple((pos[id(v[0])], v[1]) for v in n.operands),
             scope_of(n) if scope_of is not None else None) for n in order]
    outs = [(pos[id(v[0])], v[1]) for v in root_values]
    n_params = len(params)

    def fn(*inputs):
        env = {}
        for slot, x in zip(param_slots, inputs[:n_params]):
            env[slot] = (x,)
        pool_arrays = inputs[n_params:]
        for slot, pi, k in scalar_slots:
            env[slot] = (pool_arrays[pi][k],)
        for slot, entry, refs, scope in plan:
            if scope is None:
                env[slot] = apply_entry(entry, [env[s][i] for s, i in refs])
            else:
                with jax.named_scope(scope):
                    env[slot] = apply_entry(entry, [env[s][i] for s, i in refs])
        return [env[s][i] for s, i in outs]

    return fn, pools


def _pool_arrays(scalars):
    by = collections.defaultdict(list)
    for s in scalars:
        by[s.entry].append(s.data)
    return [np.asarray(by[p], dtype=p) for p in sorted(by)]


def run(root_values, owners=(), donate=False, reason="user"):
    """Compute root_values; -> list of jax.Arrays. `owners` are base tensors
    whose previous data may be donated."""
    with _lock:
        order, pos, params, scalars, sig = _collect(root_values)
        key = tuple(sig)
        donated = ()
        if donate and _donate_ok and owners:
            dset = {id(t._last_data) for t in owners if getattr(t, "_last_data", None) is not None
                    and t._last_data.exclusive}
            donated = tuple(i for i, p in enumerate(params) if id(p) in dset)
            key = key + (("donate",) + donated,)
        exe = _cache.get(key)
        g = _dbg.graph(order, params, scalars, root_values, key, reason) if exe is None or _dbg.active else None
        jax_device()  # brings the device (and a multi-process job) up before inputs move
        inputs = [p.data for p in params] + _pool_arrays(scalars)
        if exe is None:
            metrics.counter("UncachedCompile")
            cache_before = _dbg.before_compile(g)
            t0 = time.perf_counter_ns()
            fn, pools = _build_fn(order, pos, params, scalars, root_values)
            compiled = _dbg.load_compiled(g, inputs, donated)  # persistent cache hit: no JAX tracing
            if compiled is not None:
                pass
            elif _multi() and _job_wants(order):  # collectives: one program over every process
                from . import job
                compiled = job.compile(fn, inputs, donated, order)
            else:
                jitted = jax.jit(fn, donate_argnums=donated)
                compiled = jitted.lower(*inputs).compile()
            metrics.metric("CompileTime", time.perf_counter_ns() - t0)
            exe = Executable()
            exe.compiled = compiled
            exe.n_out = len(root_values)
            exe.hash = hash(key)
            exe.donated = donated
            exe.n_params = len(params)
            _dbg.after_compile(g, exe, compiled, cache_before)
            _cache[key] = exe
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
        else:
            metrics.counter("CachedCompile")
            _cache.move_to_end(key)
        last_graph_info.update(hash=exe.hash, n_params=len(params), n_nodes=len(order), n_out=len(root_values))
        _dbg.execute(exe, g)
        t0 = time.perf_counter_ns()
        outs = exe.compiled(*inputs)
        metrics.metric("ExecuteTime", time.perf_counter_ns() - t0)
        for i in donated:
            params[i].data = None
        # executions on a device run in launch order: the latest outputs stand for all
        _in_flight[:] = outs
        return outs


_multi_flag = []


def _multi():
    """True when this process is one of a multi-process job (jobs run collectives)."""
    if not _multi_flag:
        from . import distributed_init
        _multi_flag.append(distributed_init.is_multiprocess())
    return _multi_flag[0]


def _job_wants(order):
    from . import job
    return job.wants(order)



def sync(tensors=None, wait=False, reason="user"):
    """Execute pending IR. tensors=None: every live pending tensor (a full barrier)."""
    with _lock:
        if tensors is None:
            bases = []
            seen = set()
            refs = tensor.pending[:]
            tensor.pending.clear()
            for r in refs:
                t = r()
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if t._v[0].kind == ir.OP:
                    bases.append(t)
            full = True
            n_refs, n_dead = len(refs), len(refs) - len(seen)
        else:
            bases = []
            seen = set()
            for t in tensors:
                b = t if t._xb is None else t._xb
                if id(b) not in seen and b._v[0].kind == ir.OP:
                    seen.add(id(b))
                    bases.append(b)
            full = False
            compact_pending()
        if bases:
            values = [b._v for b in bases]
            outs = run(values, owners=bases, donate=full, reason=reason)
            for b, v, arr in zip(bases, values, outs):
                if b._v is not v:
                    # another thread (a loader's .to(xla)) wrote b while this ran: keep its value
                    continue
                node = ir.data_node(arr, *b._aval)
                b._v = (node, 0)
                b._gen += 1  # views re-derive from the data, not the executed IR
                b._last_data = None
        if wait:
            for b in bases:
                if b._v[0].kind == ir.DATA and b._v[0].data is not None:
                    b._v[0].data.block_until_ready()
        if full:
            _dbg.barrier(reason, n_refs, n_dead)
    return bases


def compact_pending():
    """Loops that only read values (.item()) never reach a full barrier: drop the
    weakrefs of tensors that died or were computed since they were recorded."""
    if len(tensor.pending) > 8192:
        tensor.pending[:] = [r for r in tensor.pending if (t := r()) is not None and t._v[0].kind == ir.OP]


def materialize(value, aval):
    """The jax.Array for one IR value (runs only the graph it needs)."""
    node = value[0]
    if node.kind == ir.DATA:
        return node.data
    if node.kind == ir.SCALAR:
        from .dtypes import to_jax
        return np.asarray(node.data, dtype=node.entry).astype(to_jax(aval[1]))
    compact_pending()
    return run([value], reason="tensor access")[0]


_in_flight = []


def wait_device_ops():
    """Block until every execution launched so far has finished."""
    arrays = _in_flight[:]
    _in_flight.clear()
    for a in arrays:
        try:
            a.block_until_ready()
        except RuntimeError:
            pass  # donated or deleted since


def run_step_closures():
    closures = step_closures[:]
    step_closures.clear()
    for fn, args in closures:
        fn(*args)
