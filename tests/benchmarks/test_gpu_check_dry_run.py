"""scripts/gpu_check.sh --cpu: the GPU check's dry run. Every part (machine facts,
sanity, the GPT and attention benchmarks, a test subset and the fuzzer) runs
CPU-sized on the CPU and exits 0, so the script is ready when a GPU machine is;
the benchmarks' logs are checked as their CI-sized runs."""
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DROPPED = ("UPSTREAM_PYTHON", "XLA_PERSISTENT_CACHE_PATH", "PJRT_DEVICE", "CPU_NUM_DEVICES")
PARTS = ("machine", "sanity", "bench_gpt", "bench_attention", "tests", "fuzz")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """-> (the script's stdout, the folder of its logs)."""
    out = tmp_path_factory.mktemp("gpu_check")
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env["OUT"] = str(out)
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--cpu"],
                       capture_output=True, text=True, timeout=900, env=env)
    return p.stdout, out


@pytest.mark.slow
def test_every_part_exits_0(dry_run):
    text, out = dry_run
    exits = dict(re.findall(r"^=== (\w+): exit (\d+)", text, re.M))
    assert set(exits) == set(PARTS), text[-3000:]
    assert all(rc == "0" for rc in exits.values()), text[-5000:]
    assert (out / "fuzz_cuda.json").exists()


@pytest.mark.slow
def test_bench_gpt_runs_every_competitor(dry_run):
    text = (dry_run[1] / "bench_gpt.log").read_text()
    rows = {m.group(1): m for m in re.finditer(
        r"^  (torch_xla|openxla|replay|jax|eager)\s+(\S+).*?([\d.]+)M\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$",
        text, re.M)}
    assert set(rows) == {"torch_xla", "openxla", "replay", "jax", "eager"}, text
    # the same model everywhere: one parameter count
    assert len({m.group(3) for m in rows.values()}) == 1, text
    assert float(rows["torch_xla"].group(7)) == 1.0
    assert "torch_xla: 2 graphs compiled, 1.00 executables per step" in text
    # torch.compile(openxla) and replay: one executable per step as well
    for c in ("openxla", "replay"):
        assert re.search(rf"^  {c}: \d+ graphs compiled, 1.00 executables per step", text, re.M), text


@pytest.mark.slow
def test_bench_attention_times_every_row(dry_run):
    text = (dry_run[1] / "bench_attention.log").read_text()
    assert "failed" not in text, text
    for name in ("torch SDPA (cpu)", "torch_xla flash_attention", "torch_xla F.sdpa"):
        assert name in text, text
    data = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
    assert all(isinstance(v, float) and v > 0 for v in data["seconds"].values()), data
