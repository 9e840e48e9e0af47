"""bench_resnet --quick (issue 15's convolution and persistent-cache items) runs end
to end without upstream: the ResNet step table has every CPU competitor and its
ratios, and a second process with the cache compiled nothing."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_bench_resnet_quick():
    env = {k: v for k, v in os.environ.items()
           if k not in ("UPSTREAM_PYTHON", "XLA_PERSISTENT_CACHE_PATH", "PJRT_DEVICE", "CPU_NUM_DEVICES")}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_resnet.py"), "--quick"],
                         capture_output=True, text=True, timeout=600, env=env)
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
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
