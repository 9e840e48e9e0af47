"""ir: IR nodes and leaves (node.py) and the Graph (graph.py): capture from
roots, post-order, structural key, stable digest, replay on JAX values.
Imports base and ops (a node's entry is an ops.OpEntry)."""
