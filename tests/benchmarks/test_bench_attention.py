"""bench_attention --quick runs on the CPU: every row timed, none failed, the JSON line complete."""
import json


def test_bench_attention_quick(run_quick):
    text = run_quick("bench_attention.py")
    assert "failed" not in text, text
    for name in ("torch SDPA (cpu)", "torch_xla flash_attention", "torch_xla F.sdpa"):
        assert name in text, text
    data = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
    assert all(isinstance(v, float) and v > 0 for v in data["seconds"].values()), data
