"""The core benchmark runs end to end in its --quick form without upstream:
every section prints, each target line shows the issue's value and a verdict, and the
compile section measured both torch graphs of a fresh process with no disk cache."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = ("MLP 4x512, batch 256", "MNIST CNN, batch 64", "GPT 2x128, seq 64, batch 8")


def test_median_tree_takes_each_value_median(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    from bench_core import _median_tree
    runs = [{"a": 1.0, "b": {"x": 3.0, "y": None}, "t": (1.0, 5.0)},
            {"a": 3.0, "b": {"x": 1.0, "y": 2.0}, "t": (2.0, 4.0)},
            {"a": 2.0, "b": {"x": 2.0, "y": 4.0}, "t": (3.0, 6.0)}]
    assert _median_tree(runs) == {"a": 2.0, "b": {"x": 2.0, "y": 3.0}, "t": (2.0, 5.0)}


@pytest.mark.slow
def test_bench_core_quick_prints_every_section(run_quick):
    text = run_quick("bench_core.py")
    assert re.search(r"^date: \d{4}-", text, re.M) and re.search(r"^machine: \d+ cores", text, re.M), text
    assert "upstream: not run" in text, text
    for section in ("[tracing]", "[per-step tracing]", "[cached training step]", "[compiled step]", "[compile]",
                    "[index checks]"):
        assert section in text, text
    assert re.search(r"us/op traced .*target <= 6 us/op: (PASS|MISS)", text), text
    floor = re.search(r"eager CPU ([\d.]+) us/op; a __torch_dispatch__ subclass .* ([\d.]+) us/op \(the floor", text)
    assert floor and 0 < float(floor.group(1)) and 0 < float(floor.group(2)), text
    assert "target: torch_xla/upstream <= 0.75" in text, text
    per_step = text.split("[per-step tracing]")[1].split("[cached training step]")[0]
    chain = float(re.search(r"torch_xla: ([\d.]+) us/op traced", text).group(1))
    for name in MODELS:
        # the step's time, no upstream, then ops/step, us/op, the chain's us/op, the ratio and its verdict
        row = re.search(re.escape(name) + r"\s+([\d.]+)\s+-\s+-\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(PASS|MISS)",
                        per_step)
        assert row, text
        ms, ops, per_op, chain_col, ratio = (float(row.group(i)) for i in range(1, 6))
        assert ops > 50 and chain_col == chain, text
        assert abs(per_op - ms * 1e3 / ops) <= 0.02 * per_op + 0.01 and abs(ratio - per_op / chain) <= 0.02 * ratio + 0.01, text
    assert "target: step/chain <= 2" in per_step, text
    compiled = text.split("[compiled step]")[1].split("[compile]")[0]
    for name in MODELS:
        # torch_xla and pure JAX times, no upstream, xla/JAX, then executables run and compiled per step
        row = re.search(re.escape(name) + r"\s+[\d.]+\s+[\d.]+\s+-\s+[\d.]+\s+-\s+([\d.]+)\s+([\d.]+)\s+-", compiled)
        assert row, text
        assert float(row.group(1)) >= 1 and float(row.group(2)) == 0, text   # steady state: nothing compiles
    assert "target: torch_xla/JAX <= 1.05" in text, text
    cached = text.split("[cached training step]")[1].split("[compile]")[0]
    for name in MODELS:
        # torch_xla, pure JAX and eager CPU times, no upstream, then xla/JAX with its verdict
        assert re.search(re.escape(name) + r"\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+-\s+[\d.]+\s+(PASS|MISS)", cached), text
    compile_ = text.split("[compile]")[1].split("[index checks]")[0]
    # each model: a fresh process compiled exactly the two graphs of the first two steps
    assert len(re.findall(r"torch_xla\s+[\d.]+s\s+[\d.]+s\s+[\d.]+\s+[\d.]+s\s+2\s+[\d.]+s", compile_)) == 3, text
    assert len(re.findall(r"pure JAX\s+[\d.]+s", compile_)) == 3, text
    assert "WARNING" not in text, text
