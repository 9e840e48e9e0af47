"""Running a benchmark script the way CI does: in a subprocess, on the default CPU
device, without upstream or a persistent cache from the caller's environment."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DROPPED = ("UPSTREAM_PYTHON", "XLA_PERSISTENT_CACHE_PATH", "PJRT_DEVICE", "CPU_NUM_DEVICES")


@pytest.fixture
def run_quick():
    """run_quick("bench_x.py") -> its stdout after `--quick` succeeded."""
    def run(script):
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
        out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), "--quick"],
                             capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout
    return run
