"""The compile cache's LRU really lets executables go: nothing else keeps an
evicted one alive (each holds JIT code mappings; keeping thousands of them ran
a process out of memory maps in upstream's test_python_ops.py), and the
xla::<op> counters still count every run."""
import gc
import weakref

import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.engine.compile import cache


def test_evicted_executables_are_released_and_still_counted(dev, monkeypatch):
    monkeypatch.setattr(cache, "CACHE_SIZE", 4)
    x = torch.randn(3).to(dev)
    torch_xla.sync()
    met.clear_counters()
    refs = []
    for i in range(12):                      # 12 distinct graphs, 4 kept
        y = torch.cat([x.exp()] * (i + 1))
        torch_xla.sync()
        refs.append(weakref.ref(next(reversed(cache._cache.values()))))
    gc.collect()
    alive = [r for r in refs if r() is not None]
    assert len(alive) <= 4, f"{len(alive)} executables alive with a cache of 4"
    assert met.counter_value("xla::exp") == 12 and met.counter_value("xla::cat") == 12
    assert y.cpu().shape == (36,)


def test_cache_halves_when_memory_maps_run_short(dev, monkeypatch):
    # past 3/4 of the kernel's map limit the oldest half of the cache is dropped
    # (here the limit is pretended to be just above what the process uses)
    monkeypatch.setattr(cache, "_MAP_LIMIT", cache._maps_in_use() + 10)
    met.clear_counters()
    x = torch.randn(2).to(dev)
    torch_xla.sync()
    before = cache.size()
    for i in range(64):
        y = torch.cat([x.neg()] * (i + 40))
        torch_xla.sync()
    assert met.counter_value("CompilationCacheMapRelief") >= 1
    assert cache.size() < before + 64 and y.shape == (206,)
