"""Executables by graph key: an in-memory LRU, then the persistent disk cache,
then the process's compile strategy.

`lookup(key)` finds a compiled graph (one dictionary probe); `compile_graph(graph,
inputs)` makes one, from the disk cache when `xr.initialize_cache` turned it on,
else with the strategy. lazy/launch.py is their caller.
"""
import collections
import threading
import time

from ..base import config, metrics, profiling
from ..runtime import topology
from . import compiler, persistent

lock = threading.RLock()   # held around lookup, compile and launch (lazy/launch.py)
_cache = collections.OrderedDict()


class Executable:
    """A compiled graph and what its launch needs: `compiled(*inputs)` runs it."""
    __slots__ = ("compiled", "n_out", "hash", "donated", "n_params", "metric", "__weakref__")


def lookup(key):
    """The cached executable for `key` (marked most recently used), or None."""
    exe = _cache.get(key)
    if exe is not None:
        _cache.move_to_end(key)
    return exe


def compile_graph(graph, inputs):
    """Compile (or load from disk) and cache; -> Executable. Counts
    PersistentCacheHit / PersistentCacheMiss and CompileTime."""
    topology.lock()
    t0 = time.perf_counter_ns()
    compiled, digest = persistent.load(graph, inputs)
    if compiled is not None:
        metrics.counter("PersistentCacheHit")
    else:
        before = persistent.snapshot()
        with profiling.region(profiling.COMPILE):
            compiled = compiler.strategy().compile(graph, inputs)
        if digest is not None:
            metrics.counter("PersistentCacheMiss")
            persistent.store(digest, compiled)
        else:
            persistent.account(before)
    metrics.metric("CompileTime", time.perf_counter_ns() - t0)
    exe = Executable()
    exe.compiled = compiled
    exe.n_out = len(graph.roots)
    exe.hash = hash(graph.key)
    exe.donated = graph.donated
    exe.n_params = len(graph.params)
    # upstream times a program run over every device as ExecuteReplicatedTime
    exe.metric = "ExecuteReplicatedTime" if getattr(compiled, "replicated", False) else "ExecuteTime"
    _cache[graph.key] = exe
    limit = max(config.read("XLA_COMPILATION_CACHE_SIZE"), 1)
    while len(_cache) > limit:
        _cache.popitem(last=False)
    _watch_memory_maps()
    return exe


# XLA:CPU maps each kernel's JIT code in memory regions of its own (three per
# kernel: 20-70 for a small graph). Thousands of cached executables can reach the
# kernel's per-process map limit, after which LLVM fails ("Cannot allocate
# memory") and the process dies. So past 13/16 of the limit the oldest
# executables go until the process is back under 3/4: a file of a thousand small
# graphs compiled once and reused (upstream's test_python_ops) keeps them all.
# Counting the maps reads /proc/self/maps (about 1.3 ms per thousand), so the
# next count is scheduled from the largest growth per compile seen so far: at
# most half of what is left below the limit could be used up before it (at most
# 64 compiles apart).
_watch = {"compiles": 0, "next": 1, "used": 0, "at": 0, "rate": 64.0}   # the first count is the baseline


def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


_MAP_LIMIT = _map_limit()


def _maps_in_use():
    try:
        with open("/proc/self/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


def _watch_memory_maps():
    w = _watch
    w["compiles"] += 1
    if w["compiles"] < w["next"] or not _MAP_LIMIT:
        return
    used = _maps_in_use()
    if used is None:
        w["next"] = float("inf")
        return
    n = w["compiles"]
    if w["at"] and n > w["at"] and used > w["used"]:
        w["rate"] = max(w["rate"], (used - w["used"]) / (n - w["at"]))
    if used >= _MAP_LIMIT * 13 // 16:
        used = _relieve_memory_maps(used)
    w["used"], w["at"] = used, n
    room = _MAP_LIMIT - used
    w["next"] = n + int(min(64, max(1, room / (2 * w["rate"]))))


def _relieve_memory_maps(used):
    """Drop the oldest executables until the maps in use are under 3/4 of the limit."""
    target = _MAP_LIMIT * 3 // 4
    metrics.counter("CompilationCacheMapRelief")
    while _cache and used >= target:
        # maps per executable, over-estimated (the process's own maps counted in):
        # each batch is at most what is needed
        per = max(used / len(_cache), 1.0)
        k = min(len(_cache), max(1, int((used - target) / per) + 1))
        for _ in range(k):
            _cache.popitem(last=False)
        now = _maps_in_use()
        if now is None:
            return used
        if now >= used:   # nothing freed (held elsewhere): stop here
            return now
        used = now
    return used


def size():
    return len(_cache)


def live():
    """The executables still cached."""
    return list(_cache.values())


def clear():
    _cache.clear()
