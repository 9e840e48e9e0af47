"""aten -> JAX lowering rules, one module per op family.

  registry.py     @lower / @handler and the lookup
  elementwise.py  arithmetic, comparisons, unary math, where/clamp, casts
  reductions.py   sum/mean/max/..., softmax families, cumulative ops
  shape_ops.py    views, cat/stack, indexing, gather/scatter, padding
  nn.py           convolution, pooling, normalisation, losses, dropout, attention
  linalg.py       matmul family, einsum-able products
  factories.py    full/arange/eye/... and *_like
  random.py       the device generator and random ops
  resample.py     upsample_* (+ backward), adaptive max pooling
  fft.py          _fft_r2c / _fft_c2c / _fft_c2r
  collectives.py  all_reduce/all_gather/... over the job's mesh axis
  data_dependent.py  nonzero, x[mask], masked_select, unique: read what decides the shape
  barrier.py      optimization_barrier_ (lax.optimization_barrier, in place)
  optim.py        fused Adam/AdamW/SGD kernels, GradScaler unscale/update (found_inf stays on the device)
"""
from . import registry  # noqa: F401
from . import elementwise, reductions, shape_ops, nn, linalg, factories, random  # noqa: F401
from . import collectives  # noqa: F401
from . import resample, fft  # noqa: F401
from . import rnn  # noqa: F401,E402
from . import data_dependent  # noqa: F401,E402
from . import optim  # noqa: F401,E402
from . import barrier  # noqa: F401,E402
