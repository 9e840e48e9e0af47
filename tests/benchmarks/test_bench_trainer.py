"""The Trainer benchmark runs in its CI-sized form: both competitors finish, the fused
AdamW (the Trainer's default) runs on the device, and steps stop compiling after warm-up."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_bench_trainer_quick():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_trainer.py"), "--quick"],
                         capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"^  eager\s+[\d.]+\s+1\.00", out.stdout, re.M), out.stdout
    row = re.search(r"^  torch_xla\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\S+) on xla:0",
                    out.stdout, re.M)
    assert row, out.stdout
    first, second = int(row.group(1)), int(row.group(2))
    # before the fused optimizer ran on the device, the first step compiled 41 graphs
    assert first <= 4 and second - first <= 1, out.stdout
    by_step = [int(v) for v in re.search(r"each step: \[([\d, ]+)\]", out.stdout).group(1).split(",")]
    assert by_step[-1] - by_step[1] <= 1, out.stdout   # at most the first logging step's graph
