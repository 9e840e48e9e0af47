"""compile: a Graph in, an executable out.

compiler.py holds the `Compiler` interface (`compile(graph, inputs)`), the
local `jax.jit` strategy and the strategy registry keyed by the topology's
mode; job.py the multi-process strategy (shard_map over the job's mesh);
cache.py the in-memory LRU and persistent.py the on-disk cache in front of
whichever strategy runs. Imports base, runtime, ops and ir.
"""
