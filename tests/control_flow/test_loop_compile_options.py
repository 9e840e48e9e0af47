"""On XLA:CPU a graph holding a loop compiles with the fusion emitters off (much
cheaper kernels for a loop body's stacked residuals); loop-free graphs keep XLA's
defaults. Values are the same either way."""
import jax
import torch

import torch_xla
from torch_xla.engine.compile import compiler
from torch_xla.experimental.scan import scan


def test_loop_graphs_get_the_cpu_loop_options(monkeypatch):
    seen = []
    real = jax.stages.Lowered.compile

    def spy(self, *a, **k):
        seen.append(k.get("compiler_options"))
        return real(self, *a, **k)

    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
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
    assert compiler._loop_options_ok[0]
    assert compiler._LOOP_OPTIONS in seen          # the graph with the while loop

    seen.clear()
    y = (torch.randn(4, device=d) * 3).sum()
    y.cpu()
    assert seen and all(o is None for o in seen)   # a loop-free graph: XLA's defaults
