"""Executables by graph key: an in-memory LRU, then the persistent disk cache,
then the process's compile strategy.

`get(graph, inputs)` -> (Executable, compiled_now). A hit in memory costs one
dictionary lookup; a miss consults the disk cache (when `xr.initialize_cache`
turned it on) before compiling.
"""
import collections
import threading
import time

from ..base import config, metrics, profiling
from ..runtime import topology
from . import compiler, persistent

lock = threading.RLock()   # held by the executor around lookup, compile and launch
_cache = collections.OrderedDict()
CACHE_SIZE = config.integer("XLA_COMPILATION_CACHE_SIZE", 2048)


class Executable:
    """A compiled graph and what the executor needs to run it."""
    __slots__ = ("compiled", "n_out", "hash", "donated", "n_params", "__weakref__")

    def __call__(self, *inputs):
        return self.compiled(*inputs)


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
    _cache[graph.key] = exe
    while len(_cache) > max(CACHE_SIZE, 1):
        _cache.popitem(last=False)
    _compiles[0] += 1
    if _compiles[0] % 64 == 0:
        _relieve_memory_maps()
    return exe


# XLA:CPU maps each executable's JIT code in its own memory regions (about 30
# for a small graph). Thousands of cached executables can reach the kernel's
# per-process map limit, after which LLVM fails ("Cannot allocate memory") and
# the process dies; so past 3/4 of the limit the oldest half of the cache goes.
_compiles = [0]


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


def _relieve_memory_maps():
    if not _MAP_LIMIT:
        return
    used = _maps_in_use()
    if used is None or used < _MAP_LIMIT * 3 // 4:
        return
    for _ in range(len(_cache) // 2):
        _cache.popitem(last=False)
    metrics.counter("CompilationCacheMapRelief")


def size():
    return len(_cache)


def live():
    """The executables still cached."""
    return list(_cache.values())


def clear():
    _cache.clear()
