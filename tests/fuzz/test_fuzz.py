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

# seed -> bug class (K: in the list of known bugs being fixed, N: found by the fuzzer)
KNOWN_FAILING = {
    14: "K9 missing check (index_put_ dtype)",
    15: "K9 missing check (std of int)",
    21: "N1 dtype not implemented (lerp of long)",
    24: "N11 write into a one-window unfold refused as overlapping",
    29: "K10 out-of-range dim: exception type",
    30: "K10 out-of-range dim: no error",
    50: "K7 pow(bool) dtype",
    55: "N1 dtype not implemented",
    65: "N8 dtype check (index_add_)",
    69: "N1 dtype not implemented",
    73: "N1 dtype not implemented",
    90: "K3 int64 pow exponent >= 64",
    93: "N8 dtype check (out=)",
    96: "N2 in-place shape error as LoweringError",
    100: "N1 dtype not implemented",
    110: "K9 missing check (var of int)",
    111: "N3 resize_ of a view (out=)",
    120: "N1 dtype not implemented",
    121: "K10 out-of-range dim: exception type",
    133: "N1 dtype not implemented",
    136: "N3 resize_ of a view",
    157: "N1 dtype not implemented",
    161: "N1 dtype not implemented",
    167: "K7 cummin NaN indices",
    173: "N3 resize_ of a view",
    183: "N1 dtype not implemented",
    185: "N2 index_put shape error as LoweringError",
    186: "N1 dtype not implemented",
    190: "N1 dtype not implemented",
    202: "N1 dtype not implemented",
    203: "N1 dtype not implemented",
    210: "K9 missing check (relu of bool)",
    213: "N1 dtype not implemented",
    240: "N1 dtype not implemented",
    249: "N2 copy_ shape error as LoweringError",
    254: "K9 missing check (sub of bool)",
    263: "N1 dtype not implemented",
    269: "N1 dtype not implemented",
    279: "K9 missing check (var of int)",
    287: "N1 dtype not implemented",
    293: "N1 dtype not implemented",
    298: "N12 fill_ of an int view with a requires-grad value",
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
