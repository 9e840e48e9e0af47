"""lazy: the lazy tensor and everything between an aten call and a barrier.

  device.py          the `xla` device in PyTorch (PrivateUse1 hooks, guard, factories)
  tensor.py          XLATensor and its __torch_dispatch__
  tracing.py         one aten call -> one IR node (argument walk, shape memo, abstract check)
  dispatch.py        which path an op takes (handler, view, in-place, rule, decomposition, fallback)
  views.py           aliasing: views re-derive from their base, writes scatter back
  transfers.py       uploads, host reads, copy_/_to_copy
  handlers/          tensor-level handlers (random state, data-dependent ops, batch norm)
  fallback.py        ops without a rule run on the CPU
  autocast.py        torch.autocast("xla")
  autograd_errors.py errors on autograd's device thread
  mode.py            the trace mode: lazy, eager, full-graph
  executor.py        barrier -> Graph -> compile -> run -> write back, emitting events
Imports base, runtime, ops, ir and compile.
"""
