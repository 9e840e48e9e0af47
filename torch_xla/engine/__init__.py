"""The engine behind the public torch_xla modules, in layers that import downward only:

  base/      config, events, metrics, dtypes, frames           (imports nothing of the engine)
  runtime/   platform, topology, distributed start-up          (base)
  ops/       lowering rules, registry, lowering context        (base, runtime)
  ir/        nodes and the Graph                               (base, runtime, ops)
  compile/   Compiler strategies, executable caches            (... ir)
  lazy/      XLATensor, tracing, views, dispatch, executor     (... compile)
  observe/   debug analyses and dumps, as event subscribers    (... lazy)
  api.py     the surface public modules use, and start()       (everything)

Nothing happens at import: torch_xla/__init__ calls api.start().
tests/test_layering.py keeps the order honest.
"""
