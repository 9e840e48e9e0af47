"""bench_resnet --quick (convolutions and the persistent cache) runs end
to end without upstream: the ResNet step table has every CPU competitor and its
ratios, and a second process with the cache compiled nothing."""
import re

import pytest


@pytest.mark.slow
def test_bench_resnet_quick(run_quick):
    text = run_quick("bench_resnet.py")
    assert "failed" not in text, text
    step = text.split("[ResNet-18 step]")[1].split("[persistent cache]")[0]
    # ours: two graphs, the first two steps; pure JAX and eager CPU (all threads, one thread)
    assert re.search(r"torch_xla\s+[\d.]+s\s+[\d.]+s\s+[\d.]+\s+-?[\d.]+s\s+2\s+[\d.]+s", step), text
    assert re.search(r"pure JAX\s+[\d.]+s\s+[\d.]+s\s+[\d.]+", step), text
    assert re.search(r"eager CPU, 1 thread\s+[\d.]+s\s+[\d.]+", step), text
    assert re.search(r"torch_xla/eager [\d.]+, pure JAX/eager [\d.]+, torch_xla/JAX [\d.]+", step), text
    cache = text.split("[persistent cache]")[1]
    rows = re.findall(r"torch_xla\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+"
                      r"(PASS|MISS)", cache)
    assert len(rows) == 1, text              # the MNIST CNN in --quick
    for first, second, steady, over, launch, hits, compile_s, _ in rows:
        assert int(hits) >= 1, text             # the second process loaded its first graph
        assert float(second) < float(first), text
