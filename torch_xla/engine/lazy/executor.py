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
import time
import weakref

import jax
import numpy as np

from ..base import config, events, metrics
from ..base.dtypes import to_jax
from ..ir import node as ir
from ..ir.graph import Graph, xla_shape
from ..runtime import topology
from . import device_groups, donation, host, index_checks, launch, mode, padding, state
from .state import value_of

step_closures = []
full_barriers = [0, 0]   # full barriers so far, and those that ran pending work (step boundaries)
# Values watched until the next full barrier (the outputs of compiled calls that ran
# at once), held weakly, and the numbers of the recent full barriers whose graph read
# one: such a call is part of a longer step (see watch_values).
_watched = weakref.WeakSet()
_read_watched = []


def run(root_values, owners=(), donate=False, reason="user", device=0, donate_marked=False):
    """Compute root_values on xla:<device>; -> list of jax.Arrays. `owners` are
    the Bases whose previous data may be donated (their roots come first);
    donate_marked: buffers marked as donors are donated in a partial run too.

    Runs through launch.launch (events, compile, out-of-memory errors); a
    graph inside torch_xla.compile(full_graph=True) is refused first."""
    with launch.lock:
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
        # partial sync when asked (a compiled call that runs at once, as upstream's)
        # or with alias_with_buffer_donor_config on (as upstream)
        marked = donation.marked_params(g) if (donate or donate_marked or donation.enabled()) else ()
        if marked:
            g.donate(sorted(set(g.donated) | set(marked)))
        perm = _donor_order(g, writers if writers is not None else _writers(owners)) if g.donated else None
        if perm is not None:
            g.permute_roots(perm)
        if donate and _watched and any(p in _watched for p in g.params):
            _read_watched.append(full_barriers[0])
            del _read_watched[:-16]
        if not mode.allow_execution():
            mode.unexpected_execution(g, reason)
        t_unwrap = time.perf_counter_ns()
        params = g.param_arrays()
        pools = _pools(g) if g.scalars else ()
        metrics.metric("UnwrapXlaData", time.perf_counter_ns() - t_unwrap)
        outs = launch.launch(g, params, pools, reason, device)
        if perm is not None:
            back = [None] * len(outs)
            for k, i in enumerate(perm):
                back[i] = outs[k]
            outs = back
        if check_values:
            index_checks.deliver(outs[n_roots:], check_infos)
            outs = outs[:n_roots]
        return outs


_pool_memo = {}   # the graph's scalar leaves (identity) -> their host pools
_POOL_MEMO_SIZE = 64


def _pools(g):
    """g's scalar pools (numpy arrays, one per dtype). A step feeds the same
    scalar leaves every time (a constant lr, momentum, eps: the leaves are cached
    per value), so the pools are kept by the leaves themselves; the memo holds
    them, so no other leaf can take a kept one's identity."""
    key = tuple(g.scalars)
    pools = _pool_memo.get(key)
    if pools is None:
        if len(_pool_memo) >= _POOL_MEMO_SIZE:
            _pool_memo.pop(next(iter(_pool_memo)))
        pools = _pool_memo[key] = g.pool_arrays()
    return pools


def _writers(owners):
    """id of each owner's data before this step's writes -> the owner's index (its root's)."""
    return {id(b.prev_data): k for k, b in enumerate(owners) if b.prev_data is not None}


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


def pending_roots(tensors=None):
    """IR values of `tensors` (None: every live pending base), for dumps and
    graph hashes; nothing runs."""
    if tensors is None:
        return [b.value for b in state.live_pending()]
    out = []
    for t in tensors:
        if "_lazy" not in getattr(t, "__dict__", ()):
            raise TypeError(f"expected XLA tensors, got a {type(t).__name__} on {getattr(t, 'device', '?')}")
        out.append(value_of(t))
    return out


def sync(tensors=None, wait=False, reason="user", donate_marked=False):
    """Execute pending IR: of `tensors` (XLA tensors or Bases), or of every live
    pending tensor (None: a full barrier); -> the Bases computed.
    donate_marked: a partial sync donates buffers marked as donors (a full one always does)."""
    index_checks.verify(block=False)   # flags of earlier steps that are ready by now
    with launch.lock:
        if tensors is None:
            full_barriers[0] += 1
            bases, n_refs, n_live = state.take_pending()
            if bases:
                full_barriers[1] += 1
            else:
                # no live tensor computes anything: the index checks still pending
                # guard values nobody can read any more (a step whose results were all
                # dropped). They would otherwise join the next, unrelated graph.
                index_checks.take_pending(None, full=True)
            full = True
            views = _live_pending_views(bases)
        else:
            bases = []
            seen = set()
            for t in tensors:   # tensors, or the Bases they read
                b = t if type(t) is state.Base else state.base_of(t)
                if id(b) not in seen and b.is_pending:
                    seen.add(id(b))
                    bases.append(b)
            full = False
            views = ()
            state.compact()
        for group in device_groups.split(bases):
            values = [b.value for b in group]
            roots = padding.roots(group, values)   # padded data stays padded
            vvals = [v.value for v in views]
            outs = run(roots + vvals if vvals else roots, owners=group, donate=full, reason=reason,
                       device=group[0].device if device_groups.active else 0, donate_marked=donate_marked)
            # a tensor another thread (a loader's .to(xla)) wrote meanwhile keeps its value
            t_wrap = time.perf_counter_ns()
            for b, v, arr in zip(group, values, outs):
                b.computed(arr, expected=v)
            for view, v, arr in zip(views, vvals, outs[len(values):]):
                view.computed(arr, v)
            metrics.metric("WrapXlaData", time.perf_counter_ns() - t_wrap)
        if full:
            host.upload_held()   # tensors still on the host (SPMD) go to the device, as upstream's sync
        if wait:
            for b in bases:
                node = b.data_node()
                if node is not None and node.data is not None:
                    node.data.block_until_ready()
        if full:
            _watched.clear()
        if full and events.wanted("barrier"):
            events.emit("barrier", reason=reason, created=n_refs, dead=n_refs - n_live)
    return bases


def compile_pending(tensors=None, reason="compile only"):
    """Compile, without running anything, the graph a full barrier would run now
    (tensors=None: every live pending tensor) or the graph of `tensors`' pending
    values, with the donation that barrier would make (parameters written in
    place give their buffers to their new values); -> (graph, executable).

    Placeholder leaves (no data) are abstract inputs laid out as mark_sharding
    laid them out, so a step over parameters that exist nowhere compiles as it
    would over real ones. The tensors keep their pending values."""
    with launch.lock:
        if tensors is None:
            bases = state.live_pending()
        else:
            bases, seen = [], set()
            for t in tensors:
                b = state.base_of(t)
                if id(b) not in seen and b.is_pending:
                    seen.add(id(b))
                    bases.append(b)
        if not bases:
            raise RuntimeError("torch_xla: compile_pending: no pending tensor to compile")
        g = Graph.capture([b.value for b in bases])
        if config.read("XLA_ENABLE_PARAM_ALIASING"):
            writers = _writers(bases)
            g.donate(i for i, p in enumerate(g.params) if id(p) in writers and p.exclusive)
            perm = _donor_order(g, writers) if g.donated else None
            if perm is not None:
                g.permute_roots(perm)
        specs = g.input_specs(to_jax)
        inputs = [p.data if p.data is not None else spec for p, spec in zip(g.params, specs)]
        exe, _ = launch.prepare(g, inputs + specs[len(g.params):], reason)
        return g, exe


def watch_values(values):
    """Watch the device data of IR values until the next full barrier, which
    notes whether its graph reads one (barrier_read_watched)."""
    for node, _ in values:
        if node.kind == ir.DATA:
            _watched.add(node)


def barrier_read_watched(number):
    """Whether full barrier `number` (full_barriers[0] as it counted it) ran a
    graph reading a value watched before it (one of the last 16 such barriers)."""
    return number in _read_watched


def materialize(value, aval, device=0):
    """The jax.Array for one IR value on xla:<device> (runs only the graph it needs)."""
    node = value[0]
    if node.kind == ir.DATA:
        if node.data is None:
            if donation.is_consumed(node):
                raise RuntimeError(f"torch_xla: this tensor's buffer ({xla_shape(*node.entry)}) is deleted: it was "
                                   "donated to a graph that already ran (_set_buffer_donation)")
            raise RuntimeError(f"torch_xla: a placeholder tensor ({xla_shape(*node.entry)}) has no data: "
                               "it can be traced (graph text, HLO) but not computed or read")
        return node.data
    if node.kind == ir.SCALAR:
        return np.asarray(node.data, dtype=node.entry).astype(to_jax(aval[1]))
    state.compact()
    written = _written_in(value, device)
    if not written:
        out = run([value], reason="tensor access", device=device)[0]
    else:
        values = [b.value for b in written]
        outs = run([value] + values, reason="tensor access", device=device)
        out = outs[0]
        for b, v, arr in zip(written, values, outs[1:]):
            b.computed(arr, expected=v)
    index_checks.verify(block=True)   # a host read waits anyway
    return out


def _written_in(value, device):
    """Live Bases written in place (a KV cache, running statistics) whose pending
    value the graph of `value` computes anyway. A host read hands them back as data
    too: without that, a loop that reads a value each iteration and never reaches a
    barrier (model.generate's stopping checks) re-ran every earlier write, and each
    new graph was longer than the last. One process, one device program only: replicas
    of a job (or an SPMD program) keep running the same program whatever each holds."""
    if topology.mode() != topology.SINGLE:
        return ()
    cands = state.live_pending()
    if not cands:
        return ()
    pos = Graph.capture([value]).pos
    seen = set()
    out = []
    for b in cands:
        if id(b.value[0]) in pos and b.value is not value and \
                (not device_groups.active or b.device == device):
            seen.add(id(b))
            out.append(b)
    # a view written in place (x.view(-1).index_add_(...)) holds the op's result while
    # its base holds the scatter back: the graph computes the base's value too
    for r in state.pending_views:
        v = r()
        if v is None:
            continue
        b = v.base
        if id(b) not in seen and b.is_pending and v.is_current() and id(v.value[0]) in pos \
                and (not device_groups.active or b.device == device):
            seen.add(id(b))
            out.append(b)
    return out


def _live_pending_views(bases):
    """Live views whose cached value derives from a Base this barrier computes
    (one device only: views of several devices' bases keep being derived); the
    graph computes them as outputs of their own, so later graphs read them as
    data instead of deriving them again."""
    refs = state.take_pending_views()
    if not refs or device_groups.active:
        return ()
    synced = {id(b) for b in bases}
    out, seen = [], set()
    for r in refs:
        v = r()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if id(v.base) in synced and v.is_current() and v.value[0].kind == ir.OP and v.chain:
            out.append(v)
    return out


def wait_device_ops():
    """Block until every execution launched so far has finished."""
    launch.wait()
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
