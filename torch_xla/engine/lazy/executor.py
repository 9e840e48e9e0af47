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
import atexit
import collections
import threading
import time

import jax
import numpy as np
import torch

from ..base import config, events, metrics, profiling
from ..compile import cache
from ..ir import node as ir
from ..ir.graph import Graph
from ..runtime import topology
from ..runtime.platform import jax_device
from . import device_groups, donation, exec_time, index_checks, mode, tensor

_lock = cache.lock
last_graph_info = {}
step_closures = []


class ExecutionError(RuntimeError):
    pass


def run(root_values, owners=(), donate=False, reason="user", device=0):
    """Compute root_values on xla:<device>; -> list of jax.Arrays. `owners` are
    base tensors whose previous data may be donated.

    Events: `captured` (before anything runs, when subscribed), `compile_begin`
    and `compiled` around a cache miss, `executed` after the launch, `failed`
    when compiling or running raises (a subscriber may return a note that is
    attached to the error)."""
    t_wait = time.perf_counter_ns()
    with _lock:
        metrics.metric("DeviceLockWait", time.perf_counter_ns() - t_wait)
        n_roots = len(root_values)
        if donate and not device_groups.active:
            # a full barrier takes every pending index check: one walk of the graph
            check_values, check_infos = index_checks.take_pending(None, full=True)
            g = Graph.capture(list(root_values) + check_values if check_values else root_values)
        else:        # a host read (or one device's part) takes the checks of the graph it runs
            g = Graph.capture(root_values, device)
            check_values, check_infos = index_checks.take_pending(g, full=False)
            if check_values:
                g = Graph.capture(list(root_values) + check_values, device)
        writers = None   # id of an owner's previous data -> the owner's root index
        if donate and owners and config.read("XLA_ENABLE_PARAM_ALIASING"):
            writers = _writers(owners)
            g.donate(i for i, p in enumerate(g.params) if id(p) in writers and p.exclusive)
        # explicit donors (_set_buffer_donation): a full barrier honours them; a
        # partial sync only with alias_with_buffer_donor_config on (as upstream)
        marked = donation.marked_params(g) if (donate or donation.enabled()) else ()
        if marked:
            g.donate(sorted(set(g.donated) | set(marked)))
        perm = _donor_order(g, writers if writers is not None else _writers(owners)) if g.donated else None
        if perm is not None:
            g.permute_roots(perm)
        key = g.key
        exe = cache.lookup(key)
        if not mode.allow_execution():
            mode.unexpected_execution(g, reason)
        if events.wanted("captured"):
            events.emit("captured", graph=g, reason=reason, cached=exe is not None)
        jax_device()  # brings the device (and a multi-process job) up before inputs move
        t_unwrap = time.perf_counter_ns()
        inputs = g.inputs()
        if g.scalars:
            inputs = _upload_scalar_pools(inputs, len(g.params), device)
        metrics.metric("UnwrapXlaData", time.perf_counter_ns() - t_unwrap)
        stage = "compile"
        try:
            if exe is None:
                metrics.counter("UncachedCompile")
                metrics.counter("CreateCompileHandles")
                if events.wanted("compile_begin"):
                    events.emit("compile_begin", graph=g, reason=reason)
                exe = cache.compile_graph(g, inputs)
                if events.wanted("compiled"):
                    events.emit("compiled", graph=g, executable=exe, reason=reason)
            else:
                metrics.counter("CachedCompile")
            last_graph_info.update(hash=exe.hash, n_params=len(g.params), n_nodes=len(g.order),
                                   n_out=n_roots)
            stage = "run"
            t0 = time.perf_counter_ns()
            with profiling.region(profiling.EXECUTE):
                outs = exe.compiled(*inputs)
            exec_time.launched("ExecuteTime", t0, outs)
        except Exception as e:
            notes = events.emit("failed", graph=g, stage=stage, error=e) if events.wanted("failed") else ()
            if _is_oom(e):
                oom = _out_of_memory(g, stage, e)
                for note in notes:
                    oom.add_note(note)
                raise oom from e
            for note in notes:
                try:
                    e.add_note(note)
                except AttributeError:  # pragma: no cover - Python < 3.11
                    pass
            raise
        if events.wanted("executed"):
            events.emit("executed", graph=g, executable=exe, reason=reason)
        for i in g.donated:
            donation.consumed(g.params[i])
        if perm is not None:
            back = [None] * len(outs)
            for k, i in enumerate(perm):
                back[i] = outs[k]
            outs = back
        # executions on a device run in launch order: the latest outputs stand for all
        _in_flight[:] = outs
        if check_values:
            index_checks.deliver(outs[n_roots:], check_infos)
            outs = outs[:n_roots]
        return outs


def _writers(owners):
    """id of each owner's data before this step's writes -> the owner's index (its root's)."""
    return {id(t._last_data): k for k, t in enumerate(owners) if getattr(t, "_last_data", None) is not None}


def _donor_order(g, writers):
    """The order to compute the roots in so that each tensor written in place
    gets its own donated buffer, or None when it already does.

    JAX pairs a donated input with the first output of the same shape and dtype
    that is not yet paired. Gradients and other new tensors of a parameter's
    shape, earlier in the roots, would take the parameters' buffers, and XLA
    then copies every parameter before the step overwrites it (2 copies per
    weight, each its size). So the owners' new values go first, in the order of
    the inputs they replace (g.donated is in parameter order)."""
    lead = [k for k in (writers.get(id(g.params[i])) for i in g.donated) if k is not None]
    if lead == list(range(len(lead))):
        return None
    taken = set(lead)
    return lead + [k for k in range(len(g.roots)) if k not in taken]


_pool_cache = collections.OrderedDict()   # (device, dtype, bytes) -> device array
_POOL_CACHE_SIZE = 256


def _upload_scalar_pools(inputs, n_params, device=0):
    """The step's scalar pools as device arrays. A pool whose values were seen
    recently is reused (a constant learning rate costs no upload per step), as
    upstream caches its scalar device data; a real upload is counted in
    TransferToDeviceTime like any other."""
    out = inputs[:n_params]
    dev = topology.device_for(device)
    for pool in inputs[n_params:]:
        key = (dev, pool.dtype.str, pool.tobytes())
        arr = _pool_cache.get(key)
        if arr is None:
            metrics.counter("DeviceDataCacheMiss")
            t0 = time.perf_counter_ns()
            arr = jax.device_put(pool, dev)
            metrics.metric("TransferToDeviceTime", time.perf_counter_ns() - t0)
            metrics.metric("OutboundData", pool.nbytes, kind="bytes")
            _pool_cache[key] = arr
            if len(_pool_cache) > _POOL_CACHE_SIZE:
                _pool_cache.popitem(last=False)
        else:
            _pool_cache.move_to_end(key)
        out.append(arr)
    return out


def _is_oom(e):
    return "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e)


def _out_of_memory(g, stage, e):
    """torch.OutOfMemoryError naming the graph's largest values and where they were made."""
    import math
    from ..base.dtypes import to_jax
    from ..ir.graph import op_name

    def nbytes(aval):
        shape, dtype = aval
        return math.prod(shape) * np.dtype(to_jax(dtype)).itemsize

    sized = []
    for n in g.order:
        for aval in n.entry.out_avals:
            sized.append((nbytes(aval), n, aval))
    sized.sort(key=lambda t: -t[0])
    lines = []
    for b, n, (shape, dtype) in sized[:5]:
        src = getattr(n, "src", None)
        at = f" at {src[1]}:{src[2]}" if src else ""
        lines.append(f"  {b / 2**20:.1f} MiB  {op_name(n.entry)} -> {str(dtype).replace('torch.', '')}{list(shape)}{at}")
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    hint = "" if any(getattr(n, "src", None) for _, n, _ in sized[:5]) else \
        " (PT_XLA_DEBUG_LEVEL=1 or XLA_IR_DEBUG=1 adds the user line of each)"
    return torch.OutOfMemoryError(
        f"torch_xla: the device ran out of memory to {stage} a graph of {len(g.order)} ops: {first}\n"
        f"Largest values in the graph{hint}:\n" + "\n".join(lines) +
        "\nA missing xm.mark_step() (one graph over many steps) or a large batch are the usual causes.")


def pending_roots(tensors=None):
    """IR values of `tensors` (None: every live base tensor with pending IR),
    for dumps and graph hashes; nothing runs."""
    from .views import view_value
    if tensors is None:
        out = []
        seen = set()
        for r in reversed(list(tensor.pending)):   # in sync()'s order: latest write wins
            t = r()
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            if t._xb is None and t._v[0].kind == ir.OP:
                out.append(t._v)
        out.reverse()
        return out
    out = []
    for t in tensors:
        if not hasattr(t, "_v"):
            raise TypeError(f"expected XLA tensors, got a {type(t).__name__} on {getattr(t, 'device', '?')}")
        out.append(t._v if t._xb is None else view_value(t))
    return out


def sync(tensors=None, wait=False, reason="user"):
    """Execute pending IR. tensors=None: every live pending tensor (a full barrier)."""
    index_checks.verify(block=False)   # flags of earlier steps that are ready by now
    with _lock:
        if tensors is None:
            bases = []
            seen = set()
            refs = tensor.pending[:]
            tensor.retire_pending()
            # a tensor listed twice (made, then written again) takes the place of its
            # latest write: a step that writes the same tensors in the same order keys
            # the same graph, whether or not a tensor was first made in an earlier step
            for r in reversed(refs):
                t = r()
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if t._v[0].kind == ir.OP:
                    bases.append(t)
            bases.reverse()
            full = True
            n_refs, n_dead = len(refs), len(refs) - len(seen)
            views, aliases = _live_pending_views(bases)
        else:
            bases = []
            seen = set()
            for t in tensors:
                b = t if t._xb is None else t._xb
                if id(b) not in seen and b._v[0].kind == ir.OP:
                    seen.add(id(b))
                    bases.append(b)
            full = False
            views = aliases = ()
            compact_pending()
        for group in device_groups.split(bases):
            values = [b._v for b in group]
            vvals = [t._v for t in views]
            outs = run(values + vvals if vvals else values, owners=group, donate=full, reason=reason,
                       device=group[0].device.index if device_groups.active else 0)
            # a tensor another thread (a loader's .to(xla)) wrote meanwhile keeps its value;
            # views re-derive from the data, not the executed IR (_gen)
            t_wrap = time.perf_counter_ns()
            _store(group, values, outs)
            if vvals:
                _store_views(views, vvals, outs[len(values):])
            if aliases:
                _store_aliases(aliases)
            metrics.metric("WrapXlaData", time.perf_counter_ns() - t_wrap)
        if wait:
            for b in bases:
                if b._v[0].kind == ir.DATA and b._v[0].data is not None:
                    b._v[0].data.block_until_ready()
        if full and events.wanted("barrier"):
            events.emit("barrier", reason=reason, created=n_refs, dead=n_dead)
    return bases


def compact_pending():
    """Loops that only read values (.item()) never reach a full barrier: drop the
    weakrefs of tensors that died or were computed since they were recorded."""
    if len(tensor.pending) > 8192:
        tensor.retire_pending([r for r in tensor.pending if (t := r()) is not None and t._v[0].kind == ir.OP])
    if len(tensor.pending_views) > 8192:
        tensor.pending_views[:] = [r for r in tensor.pending_views
                                   if (t := r()) is not None and t._v[0].kind == ir.OP]


def materialize(value, aval, device=0):
    """The jax.Array for one IR value on xla:<device> (runs only the graph it needs)."""
    node = value[0]
    if node.kind == ir.DATA:
        if node.data is None:
            from ..ir.graph import xla_shape
            if donation.is_consumed(node):
                raise RuntimeError(f"torch_xla: this tensor's buffer ({xla_shape(*node.entry)}) is deleted: it was "
                                   "donated to a graph that already ran (_set_buffer_donation)")
            raise RuntimeError(f"torch_xla: a placeholder tensor ({xla_shape(*node.entry)}) has no data: "
                               "it can be traced (graph text, HLO) but not computed or read")
        return node.data
    if node.kind == ir.SCALAR:
        from ..base.dtypes import to_jax
        return np.asarray(node.data, dtype=node.entry).astype(to_jax(aval[1]))
    compact_pending()
    written = _written_in(value, device)
    if not written:
        out = run([value], reason="tensor access", device=device)[0]
    else:
        outs = run([value] + [b._v for b in written], reason="tensor access", device=device)
        out = outs[0]
        _store(written, [b._v for b in written], outs[1:])
    index_checks.verify(block=True)   # a host read waits anyway
    return out


def _written_in(value, device):
    """Live tensors written in place (a KV cache, running statistics) whose pending
    value the graph of `value` computes anyway. A host read hands them back as data
    too: without that, a loop that reads a value each iteration and never reaches a
    barrier (model.generate's stopping checks) re-ran every earlier write, and each
    new graph was longer than the last. One process, one device program only: replicas
    of a job (or an SPMD program) keep running the same program whatever each holds."""
    if topology.mode() != topology.SINGLE:
        return ()
    cands = []
    for r in tensor.pending:
        t = r()
        if t is not None and t._xb is None and t._v[0].kind == ir.OP:
            cands.append(t)
    if not cands:
        return ()
    g = Graph.capture([value])
    pos = g.pos
    seen = set()
    out = []
    for t in cands:
        if id(t._v[0]) in pos and id(t) not in seen and t._v is not value and \
                (not device_groups.active or t.device.index == device):
            seen.add(id(t))
            out.append(t)
    # a view written in place (x.view(-1).index_add_(...)) holds the op's result while
    # its base holds the scatter back: the graph computes the base's value too
    for r in tensor.pending_views:
        t = r()
        if t is None:
            continue
        b = t._xb
        if b is not None and id(b) not in seen and b._v[0].kind == ir.OP and t._vgen == b._gen \
                and id(t._v[0]) in pos and (not device_groups.active or b.device.index == device):
            seen.add(id(b))
            out.append(b)
    return out


def _live_pending_views(bases):
    """Live views whose cached value derives from a base this barrier computes (one
    device only: views of several devices' bases keep being derived): (views the
    graph computes as outputs of their own, whole-base aliases).

    A view with no steps aliases its whole base (a parameter, a convolution's
    gradient): it is not an output of its own, which made XLA copy the base's
    result into a second buffer, but takes the base's new data after the run."""
    refs = tensor.pending_views[:]
    tensor.pending_views.clear()
    if not refs or device_groups.active:
        return (), ()
    synced = {id(b) for b in bases}
    out, aliases, seen = [], [], set()
    for r in refs:
        t = r()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        b = t._xb
        if b is not None and id(b) in synced and t._vgen == b._gen and t._v[0].kind == ir.OP:
            if t._chain:
                out.append(t)
            else:
                aliases.append((t, t._v))
    return out, aliases


def _store_views(views, values, arrays):
    for t, v, arr in zip(views, values, arrays):
        if t._v is v:
            t._v = (ir.data_node(arr, *t._aval), 0)
            t._vgen = t._xb._gen


def _store_aliases(aliases):
    for t, v in aliases:
        b = t._xb
        if t._v is v and b._v[0].kind == ir.DATA:
            t._v = b._v
            t._vgen = b._gen


def _store(bases, values, arrays):
    for b, v, arr in zip(bases, values, arrays):
        if b._v is not v:
            continue   # written again by another thread meanwhile
        b._v = (ir.data_node(arr, *b._aval), 0)
        b._gen += 1
        b._last_data = None


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
    index_checks.verify(block=True)


def _drain_at_exit(limit_s=None):
    """Let launched executions finish before the interpreter exits, as upstream's
    runtime does.

    Barriers only launch work: a script can end with many steps still queued on
    XLA:CPU's threads, and reaching C++ static destructors under running kernels
    segfaults the process after its Python code is done. The wait is bounded
    (`XLA_EXIT_WAIT_S`, default 900 s) so that a collective whose peers died
    cannot hang the exit."""
    if limit_s is None:
        limit_s = config.read("XLA_EXIT_WAIT_S")
    deadline = time.monotonic() + limit_s
    # every live buffer, not only the last step's outputs: a barrier can launch
    # more than one executable, and XLA:CPU may run them side by side
    for a in jax.live_arrays():
        try:
            while not a.is_ready():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.005)
        except Exception:  # donated or deleted since: nothing left to wait for
            continue


atexit.register(_drain_at_exit)


def run_step_closures():
    closures = step_closures[:]
    step_closures.clear()
    for fn, args in closures:
        fn(*args)
