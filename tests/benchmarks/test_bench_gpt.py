"""The GPU-ready GPT benchmark runs end to end in its CI-sized form on the CPU."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_gpt_quick_runs_every_competitor():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_gpt.py"), "--quick"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, PJRT_DEVICE="CPU"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = {m.group(1): m for m in re.finditer(
        r"^  (torch_xla|jax|eager)\s+(\S+).*?([\d.]+)M\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$",
        out.stdout, re.M)}
    assert set(rows) == {"torch_xla", "jax", "eager"}, out.stdout
    # the same model everywhere: one parameter count
    assert len({m.group(3) for m in rows.values()}) == 1, out.stdout
    assert float(rows["torch_xla"].group(7)) == 1.0
    assert "torch_xla compiled 2 graphs" in out.stdout
