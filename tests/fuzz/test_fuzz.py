"""The CI subset of the differential fuzzer (tests/fuzz/README.md): fixed seeds, each
program run on eager CPU and on the XLA device. A failing seed's message is its shrunk,
standalone repro. Every seed passes; a seed that fails is a bug to fix, not to list.
"""
import pytest

import fuzz_harness as harness
from fuzz_compare import accepted_subclass
from fuzz_program import Raise

SEEDS = range(0, 300)


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_seed(seed):
    prog = harness.program_of(seed)
    findings = harness.run_pair(prog)
    if not findings:
        return
    small, f = harness.shrink(prog, findings[0], budget_s=20)
    pytest.fail(f"fuzz seed {seed}: {f['kind']} at {f.get('op')} "
                f"(python tests/fuzz/run.py --seeds {seed} --show --shrink)\n\n"
                + harness.repro(small, f), pytrace=False)


def test_an_instance_of_eagers_type_is_accepted_but_not_a_lowering_error():
    from torch_xla.engine.lazy.tracing import DimensionError, LoweringError

    def raised(exc):
        return Raise(0, "stmt", type(exc).__name__, "", "", tuple(c.__name__ for c in type(exc).__mro__))

    eager_index, eager_runtime = raised(IndexError()), raised(RuntimeError())
    assert accepted_subclass(eager_index, raised(DimensionError()))
    assert accepted_subclass(eager_runtime, raised(DimensionError()))
    assert not accepted_subclass(eager_runtime, raised(LoweringError()))
    assert not accepted_subclass(eager_index, raised(RuntimeError()))
