"""XLA:CPU options chosen per graph (compiler.CPU_OPTION_RULES): a graph holding
a loop compiles with the fusion emitters off (much cheaper kernels for a loop
body's stacked residuals); a graph whose values are all small compiles at
backend optimisation level 0 with the fusion emitters off; others keep XLA's
defaults, and so does any graph deeper than a few hundred ops (the emitter used with
the fusion emitters off recurses once per fused op). Values are the same either way."""
import jax
import pytest
import torch

import torch_xla
from torch_xla.engine.compile import cache, compiler
from torch_xla.experimental.scan import scan

LOOP = {"xla_cpu_use_fusion_emitters": False}
SMALL = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


@pytest.fixture
def seen(monkeypatch):
    cache.clear()   # another test may have compiled the same graphs already
    out = []
    real = jax.stages.Lowered.compile

    def spy(self, *a, **k):
        out.append(k.get("compiler_options"))
        return real(self, *a, **k)

    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
    return out


def test_loop_graphs_get_the_cpu_loop_options(seen):
    d = torch_xla.device()
    xs = torch.randn(5, 3)
    init = torch.zeros(3)
    carry, ys = scan(lambda c, x: (c + x, c * x), init.to(d), xs.to(d))
    ref_c, ref_ys = init.clone(), []
    for x in xs:
        ref_ys.append(ref_c * x)
        ref_c = ref_c + x
    torch.testing.assert_close(carry.cpu(), ref_c)
    torch.testing.assert_close(ys.cpu(), torch.stack(ref_ys))
    assert compiler._options_ok[0]
    assert {**LOOP, **SMALL} in seen      # the graph with the while loop (small values too)


def test_small_graphs_compile_unoptimised_and_large_ones_with_defaults(seen):
    d = torch_xla.device()
    x = torch.randn(4)
    y = (x.to(d) * 3).sum()
    torch.testing.assert_close(y.cpu(), (x * 3).sum())
    assert seen == [SMALL]

    seen.clear()
    big = torch.randn(128, 64)
    z = (big.to(d) * 3).sum(0)            # 8,192 elements: XLA's defaults
    torch.testing.assert_close(z.cpu(), (big * 3).sum(0))
    assert seen and all(o is None for o in seen)


def _chain(x, n):
    for _ in range(n // 2):
        x = x * 1.0001
        x = x + 0.5
    return x


def test_deep_graphs_keep_xla_default_emitters(seen):
    # a longest path past compiler._MAX_DEPTH ops: XLA's defaults, small values or not
    d = torch_xla.device()
    x = torch.randn(16)
    y = _chain(x.to(d), 2 * compiler._MAX_DEPTH + 2)
    torch.testing.assert_close(y.cpu(), _chain(x, 2 * compiler._MAX_DEPTH + 2))
    assert seen == [None]


@pytest.mark.slow
def test_a_chain_of_thousands_of_small_ops_compiles(seen):
    # with the fusion emitters off, XLA:CPU's fused-loop emitter recursed once per op
    # and overflowed its compile thread's stack near 5,800 ops (a segfault)
    d = torch_xla.device()
    x = torch.randn(16)
    y = _chain(x.to(d), 6000)
    torch.testing.assert_close(y.cpu(), _chain(x, 6000))
