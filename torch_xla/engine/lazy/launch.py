"""The one way a compiled graph runs.

`launch(graph, params, pools, reason)` is called by every caller that
executes a graph: a barrier (executor.py), a replayed step (replay.py:
`torch_xla.compile(replay=True)` and the Dynamo bridge) and a graph kept by
hash (cached_graphs.py, upstream's `_run_cached_graph`). Each only binds its
inputs; everything else happens here, the same way for all of them:

  look the executable up by the graph's key; compile it on a miss (the
  persistent cache first; `compile_begin` / `compiled` events, the
  UncachedCompile / CachedCompile counters);
  upload the scalar pools (a pool seen recently is reused);
  launch it inside the profiler's execution region, ExecuteTime measured to
  the end of the run;
  turn a device out-of-memory into torch.OutOfMemoryError naming the graph's
  largest values; emit `failed` (observers may add notes to the error);
  emit `executed`; mark the buffers of donated inputs consumed; remember the
  outputs as the work in flight (`wait_device_ops`).

`prepare(graph, inputs, reason)` is the lookup-and-compile half alone, for a
graph compiled ahead of its first run (`_xla_warm_up_cache`).
"""
import collections
import math
import time

import jax
import numpy as np
import torch

from ..base import events, metrics, profiling
from ..base.dtypes import to_jax
from ..compile import cache
from ..ir.graph import op_name
from ..runtime import topology
from ..runtime.platform import jax_device
from . import donation, exec_time

lock = cache.lock
last_graph_info = {}
in_flight = []   # outputs of the latest launch: executions on a device run in launch order


def prepare(graph, inputs, reason):
    """The executable of `graph` (compiled now on a miss) for `inputs` of these
    avals; -> (executable, whether it was cached)."""
    with lock:
        exe = cache.lookup(graph.key)
        if events.wanted("captured"):
            events.emit("captured", graph=graph, reason=reason, cached=exe is not None)
        if exe is not None:
            metrics.counter("CachedCompile")
            return exe, True
        jax_device()   # brings the device (and a multi-process job) up first
        metrics.counter("UncachedCompile")
        metrics.counter("CreateCompileHandles")
        if events.wanted("compile_begin"):
            events.emit("compile_begin", graph=graph, reason=reason)
        try:
            exe = cache.compile_graph(graph, inputs)
        except Exception as e:
            _raise_failed(graph, "compile", e)
        if events.wanted("compiled"):
            events.emit("compiled", graph=graph, executable=exe, reason=reason)
        return exe, False


def launch(graph, params, pools, reason, device=0, donors=None):
    """Run `graph` on device arrays `params` (one per graph parameter) and host
    scalar pools `pools`; -> its outputs (jax.Arrays, launched, not awaited).

    donors: the data nodes whose buffers the graph's donated parameters take
    (default: the graph's own parameter leaves); a None entry is a buffer the
    caller keeps (a copy was donated)."""
    t_wait = time.perf_counter_ns()
    with lock:
        metrics.metric("DeviceLockWait", time.perf_counter_ns() - t_wait)
        inputs = list(params)
        if pools:
            inputs += upload_pools(pools, device)
        exe, _ = prepare(graph, inputs, reason)
        last_graph_info.update(hash=exe.hash, n_params=len(graph.params), n_nodes=len(graph.order),
                               n_out=len(graph.roots))
        t0 = time.perf_counter_ns()
        try:
            with profiling.region(profiling.EXECUTE):
                outs = exe.compiled(*inputs)
        except Exception as e:
            _raise_failed(graph, "run", e)
        exec_time.launched(exe.metric, t0, outs)
        if exe.metric != "ExecuteTime" or topology.spmd_enabled():
            # upstream counts every run of the SPMD device's programs (one that reads
            # no sharded data runs on one device here: each would compute the same)
            metrics.counter("ExecuteReplicated")
        if events.wanted("executed"):
            events.emit("executed", graph=graph, executable=exe, reason=reason)
        if graph.donated:
            nodes = graph.params if donors is None else donors
            for i in graph.donated:
                if nodes[i] is not None:
                    donation.consumed(nodes[i])
        in_flight[:] = outs
        return outs


def wait():
    """Block until every execution launched so far has finished."""
    arrays = in_flight[:]
    in_flight.clear()
    for a in arrays:
        try:
            a.block_until_ready()
        except RuntimeError:
            pass  # donated or deleted since


# -- scalar pools ------------------------------------------------------------------------

_pool_cache = collections.OrderedDict()   # (device, dtype, bytes) -> device array
_POOL_CACHE_SIZE = 256


def upload_pools(pools, device):
    """The scalar pools as device arrays. A pool whose values were seen recently
    is reused (a constant learning rate costs no upload per step), as upstream
    caches its scalar device data; a real upload is counted in
    TransferToDeviceTime like any other."""
    out = []
    dev = topology.device_for(device)
    for pool in pools:
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


# -- failures --------------------------------------------------------------------------------

def _raise_failed(graph, stage, e):
    """Raise what `_failed` makes of `e`, chained to it when it is another error."""
    err = _failed(graph, stage, e)
    try:
        if err is e:
            raise err
        raise err from e
    finally:
        del err, e   # a frame holding its exception would keep the graph's tensors alive


def _failed(graph, stage, e):
    """The error to raise for `e` (compiling or running `graph` failed): observers'
    notes attached; a device out-of-memory as torch.OutOfMemoryError."""
    notes = events.emit("failed", graph=graph, stage=stage, error=e) if events.wanted("failed") else ()
    if _is_oom(e):
        e = _out_of_memory(graph, stage, e)
    for note in notes:
        if hasattr(e, "add_note"):
            e.add_note(note)
    return e


def _is_oom(e):
    return "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e)


def _out_of_memory(g, stage, e):
    """torch.OutOfMemoryError naming the graph's largest values and where they were made."""
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
