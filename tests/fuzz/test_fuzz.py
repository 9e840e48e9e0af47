"""The CI subset of the differential fuzzer (tests/fuzz/README.md): fixed seeds, each
program run on eager CPU and on the XLA device. A failing seed's message is its shrunk,
standalone repro.

KNOWN_FAILING lists the seeds of this subset that fail today through a bug class already
recorded (and being fixed): they are expected failures, not strict, so a fix makes them
pass silently; delete an entry once its class is fixed.
"""
import pytest

import fuzz_harness as harness

SEEDS = range(0, 300)

KNOWN_FAILING = {
}


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_seed(seed):
    prog = harness.program_of(seed)
    findings = harness.run_pair(prog)
    if not findings:
        return
    if seed in KNOWN_FAILING:
        pytest.xfail(f"known: {KNOWN_FAILING[seed]}")
    small, f = harness.shrink(prog, findings[0], budget_s=20)
    pytest.fail(f"fuzz seed {seed}: {f['kind']} at {f.get('op')} "
                f"(python tests/fuzz/run.py --seeds {seed} --show --shrink)\n\n"
                + harness.repro(small, f), pytrace=False)
