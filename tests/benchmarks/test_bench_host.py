"""bench_host.py in its CI-sized form: pure JAX with host work added, a lazy and a
compiled step broken into phases, with the share of this project's dispatcher, and
PyTorch's floor (its own work in a compiled step beside pure JAX, eager's step per op)."""
import re

import pytest

PHASES = ("zero_grad", "forward", "loss", "backward", "opt.step", "mark_step")


@pytest.mark.slow
def test_bench_host_quick_prints_every_section(run_quick):
    text = run_quick("bench_host.py")
    busy = re.search(r"^  MLP 4x512, batch 256\s+([\d.]+)((?:\s+[\d.]+ \([\d.]+\)){4})$", text, re.M)
    assert busy and float(busy.group(1)) > 0, text
    for mode in ("lazy tracing", 'torch.compile(backend="openxla")'):
        section = text.split(f"[host time per step] {mode}")[1].split("\n\n")[0]
        assert all(p in section for p in PHASES), section
        cells = re.findall(r"(\d+)/\s*(\d+)/\s*(\d+)", section.splitlines()[-1])
        assert len(cells) == len(PHASES) + 1, section
        wall, inside, ops = (int(c) for c in cells[-1])   # the total
        assert 0 < inside < wall and ops > 0, section
        # the barrier and zero_grad trace nothing; the forward of the lazy step does
        assert cells[PHASES.index("mark_step")][2] == "0" and cells[0][2] == "0", section
        if mode == "lazy tracing":
            assert int(cells[PHASES.index("forward")][2]) > 0, section
    per_op = re.search(r"^  MLP 4x512, batch 256((?:\s+[\d.]+ us\s+[\d.]+x){3})$", text, re.M)
    assert per_op, text
    us = [float(v) for v in re.findall(r"([\d.]+) us", per_op.group(1))]
    assert us[0] > us[1] > us[2] > 0, text   # each share taken out leaves less
    floor = text.split("[PyTorch's floor]")[1]
    beside = re.search(r"^  MLP 4x512, batch 256\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) \(([\d.]+)\)$", floor, re.M)
    assert beside, floor
    alone, jax_alone, both, ratio = (float(v) for v in beside.groups())
    assert 0 < alone < jax_alone and both > 0 and abs(ratio - both / jax_alone) < 0.01, floor
    eager = re.search(r"^  MLP 4x512, batch 256\s+([\d.]+) us\s+[\d.]+x\s+([\d.]+) us\s+[\d.]+x\s+(\d+)$", floor, re.M)
    assert eager and float(eager.group(1)) > 0 and float(eager.group(2)) > 0 and int(eager.group(3)) > 20, floor
