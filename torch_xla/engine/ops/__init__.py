"""ops: aten -> JAX lowering rules, one module per op family, and what an op is.

  registry.py     @lower(..., platform=None) / @handler / @meta and the lookup
  context.py      the LoweringContext rules run under (ctx.entry, platform, axis)
  op.py           OpInfo / OpEntry and applying a rule to JAX values
  elementwise.py  arithmetic, comparisons, unary math, where/clamp, casts
  reductions.py   sum/mean/max/..., softmax families, cumulative ops
  shape_ops.py    views, cat/stack, indexing, gather/scatter, padding
  nn.py           convolution, pooling, normalisation, losses, attention
  linalg.py       matmul family, decompositions, solvers
  factories.py    full/arange/eye/... and *_like
  resample.py     upsample_* (+ backward), adaptive max pooling, grid sampling
  fft.py          _fft_r2c / _fft_c2c / _fft_c2r
  rnn.py          fused LSTM/GRU cells
  collectives.py  all_reduce/all_gather/... over the lowering context's mesh axis

Rules are pure: JAX arrays in, JAX arrays out. Tensor-level handlers (random
state, data-dependent shapes, batch-norm statistics) live in lazy/handlers/.
Imports base only.
"""
from . import registry  # noqa: F401
from . import elementwise, reductions, shape_ops, nn, linalg, factories  # noqa: F401
from . import collectives  # noqa: F401
from . import resample, fft  # noqa: F401
from . import rnn  # noqa: F401
from . import checks  # noqa: E402
checks.install_probes(registry.META)   # after the rule modules' own meta functions
