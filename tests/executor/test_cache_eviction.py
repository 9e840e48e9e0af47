"""The compile cache's LRU really lets executables go: nothing else keeps an
evicted one alive (each holds JIT code mappings; keeping thousands of them ran
a process out of memory maps in upstream's test_python_ops.py), and the
xla::<op> counters still count every run."""
import collections
import gc
import weakref

import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.engine.compile import cache


def test_evicted_executables_are_released_and_still_counted(dev, monkeypatch):
    monkeypatch.setenv("XLA_COMPILATION_CACHE_SIZE", "4")   # read at each compile
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


def test_oldest_executables_go_when_memory_maps_run_short(dev, monkeypatch):
    # past 13/16 of the kernel's map limit the oldest executables are dropped (here
    # the limit is pretended to be just above what the process uses, so the cache
    # cannot get back under 3/4; which ones go is checked with a fake cache below)
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


def test_relief_drops_the_oldest_executables_it_must_and_no_more(monkeypatch):
    # 100 cached executables of 40 maps each over 9,050 maps of the process's own:
    # 13,050 in use against a limit of 16,000 is past 13/16 (13,000); back under
    # 3/4 (12,000) takes dropping the 27 oldest
    fake = collections.OrderedDict((i, object()) for i in range(100))
    monkeypatch.setattr(cache, "_cache", fake)
    monkeypatch.setattr(cache, "_MAP_LIMIT", 16_000)
    monkeypatch.setattr(cache, "_maps_in_use", lambda: 9_050 + 40 * len(fake))
    monkeypatch.setattr(cache, "_watch", {"compiles": 0, "next": 1, "used": 0, "at": 0, "rate": 64.0})
    cache._watch_memory_maps()
    assert list(fake) == list(range(27, 100))


def test_maps_are_counted_before_the_limit_could_be_reached(monkeypatch):
    # the next count comes before half of what is left below the limit could be
    # used up at the largest growth per compile seen
    monkeypatch.setattr(cache, "_MAP_LIMIT", 65530)
    monkeypatch.setattr(cache, "_watch", {"compiles": 99, "next": 100, "used": 10_000, "at": 50, "rate": 64.0})
    monkeypatch.setattr(cache, "_maps_in_use", lambda: 40_000)   # 600 maps per compile since the last count
    cache._watch_memory_maps()
    w = cache._watch
    assert w["rate"] == 600 and w["used"] == 40_000
    room = 65530 - 40_000
    assert w["next"] == 100 + int(room / 1200)
