"""scripts/gpu_check.sh --cpu: the GPU check's dry run. Every part (machine facts,
sanity, the GPT and attention benchmarks, the test subset and the fuzzer) runs
CPU-sized on the CPU and exits 0, so the script is ready when a GPU machine is."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DROPPED = ("UPSTREAM_PYTHON", "XLA_PERSISTENT_CACHE_PATH", "PJRT_DEVICE", "CPU_NUM_DEVICES")

PARTS = ("machine", "sanity", "bench_gpt", "bench_attention", "tests", "fuzz")


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env["OUT"] = str(tmp_path)
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--cpu"],
                       capture_output=True, text=True, timeout=900, env=env)
    exits = dict(re.findall(r"^=== (\w+): exit (\d+)", p.stdout, re.M))
    assert set(exits) == set(PARTS), p.stdout[-3000:]
    assert all(rc == "0" for rc in exits.values()), p.stdout[-5000:]
    assert "failed" not in (tmp_path / "bench_gpt.log").read_text()
    assert (tmp_path / "fuzz_cuda.json").exists()
