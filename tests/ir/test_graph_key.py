"""The graph key: equal keys must mean the same program.

`Graph.capture` keys a graph by its nodes' hashes and, for each operand, which
earlier node (by position) and which of its outputs it reads. These tests build
IR by hand, so every node hash is fixed and only the wiring differs.
"""
import torch

from torch_xla.engine.ir.graph import Graph
from torch_xla.engine.ir.node import DATA, OP, Node
from torch_xla.engine.ops.op import OpEntry


def _entry(name, n_out):
    e = OpEntry()
    e.name = name
    e.info = None
    e.static_key = ()
    e.hash = hash(name)
    e.out_avals = [((2,), torch.float32)] * n_out
    e.out_struct = None
    return e


def test_a_node_with_more_than_16_outputs_keys_apart_from_its_successor():
    # Both graphs: x(0) many(1) next(2) use(3), every node hashing alike; `use`
    # reads output 16 of `many` in one and output 0 of `next` in the other.
    # Encoded as position * 16 + output, both operands were the number 32.
    x = Node(DATA, ((2,), torch.float32), (), 1)
    many = Node(OP, _entry("many", 17), ((x, 0),), 2)
    nxt = Node(OP, _entry("next", 1), ((x, 0),), 3)
    use = _entry("use", 1)
    reads_many = Node(OP, use, ((many, 16),), 4)
    reads_next = Node(OP, use, ((nxt, 0),), 4)
    g1 = Graph.capture([(many, 0), (nxt, 0), (reads_many, 0)])
    g2 = Graph.capture([(many, 0), (nxt, 0), (reads_next, 0)])
    assert [n.hash for n in g1.nodes] == [n.hash for n in g2.nodes]
    assert g1.key != g2.key


def test_equal_wiring_keys_equal():
    x = Node(DATA, ((2,), torch.float32), (), 1)
    many = Node(OP, _entry("many", 20), ((x, 0),), 2)
    use = _entry("use", 1)
    g1 = Graph.capture([(Node(OP, use, ((many, 17),), 4), 0)])
    g2 = Graph.capture([(Node(OP, use, ((many, 17),), 4), 0)])
    assert g1.key == g2.key
    g3 = Graph.capture([(Node(OP, use, ((many, 18),), 4), 0)])
    assert g3.key != g1.key


def test_root_order_is_part_of_the_key():
    x = Node(DATA, ((2,), torch.float32), (), 1)
    many = Node(OP, _entry("many", 20), ((x, 0),), 2)
    g1 = Graph.capture([(many, 0), (many, 16)])
    g2 = Graph.capture([(many, 16), (many, 0)])
    assert g1.key != g2.key
    g1.permute_roots([1, 0])
    assert g1.key == g2.key
