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
    return exe


def size():
    return len(_cache)


def live():
    """The executables still cached."""
    return list(_cache.values())


def clear():
    _cache.clear()
