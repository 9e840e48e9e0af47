"""lazy: the lazy tensor and everything between an aten call and a barrier.

Its modules in their import order, lowest first (tests/test_layering.py keeps
it: a module imports only modules above it in this list, never in a function):

  mode.py            the trace mode: lazy, eager, full-graph; lazy regions
  autograd_errors.py errors on autograd's device thread
  exec_time.py       ExecuteTime measured to the end of each run
  state.py           what a tensor holds: Base (its value) or View (of a Base);
                     the one writer of that state, and the pending registries
  host.py            values kept on the host until the devices need them (SPMD's
                     virtual device); the one host-to-device transfer of user data
  serialize.py       torch.save / torch.load of XLA tensors
  tensor.py          XLATensor: __torch_dispatch__ through a handler table,
                     new_base / new_view, model.to(xla)'s swap
  tracing.py         one aten call -> one IR node (argument walk, shape memo, abstract check)
  padding.py         padded shards at rest: device data under an uneven SPMD layout
  index_checks.py    deferred "indices in range" flags
  views.py           view handlers, writes through views, in-place view ops, set_/resize_
  device_groups.py   several devices in one process; which xla:N exist
  donation.py        explicit buffer donors
  launch.py          the one way a compiled graph runs (lookup, compile, events, errors)
  executor.py        barriers: pending tensors -> Graph -> launch -> new data
  eager.py           eager mode (each top-level op runs at once)
  transfers.py       uploads, host reads, copy_ / _to_copy
  fallback.py        ops without a rule run on the CPU
  autocast.py        torch.autocast("xla")
  dispatch.py        which path an op takes (handler, view, in-place, rule, decomposition, fallback)
  subgraph.py        a Python function of tensors captured as a pure JAX function
  handlers/          tensor-level handlers (random state, data-dependent ops, batch norm,
                     optimizers, barriers, sharding, control flow)
  replay.py          captured steps: torch_xla.compile(replay=True), the Dynamo bridge
  cached_graphs.py   graphs kept by hash (upstream's dynamo-bridge primitives)
  device.py          the `xla` device in PyTorch; connects the tensor to its dispatcher
Imports base, runtime, ops, ir and compile.
"""
