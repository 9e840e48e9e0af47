"""The engine behind the public torch_xla modules.

Folder map:
  device.py      registers the `xla` device with PyTorch (PrivateUse1) and its factory ops
  tensor.py      XLATensor, the lazy wrapper subclass, and its __torch_dispatch__
  ir.py          IR nodes, values and hashing
  tracing.py     turning one aten call into an IR node (argument walk, shape memo)
  views.py       aliasing: views re-derive from their base, mutations scatter back
  lowering/      aten op -> jax.numpy/lax rules, registered with @lower, by family
  executor.py    barriers: collect pending tensors, hash the graph, compile, run
  fallback.py    ops without a lowering run on the CPU (counted as aten::<op>)
  runtime.py     the JAX platform and device this process uses
  metrics.py     counters and metrics (upstream's names)
"""

# The `xla` name must belong to PrivateUse1 before anything builds torch.device("xla").
from . import device as _device  # noqa: E402

_device.register()
