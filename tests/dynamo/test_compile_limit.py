"""torch_xla.compile(num_different_graphs_allowed=...): the error names what changed."""
import pytest
import torch

import torch_xla


def test_same_graph_within_limit(dev):
    f = torch_xla.compile(lambda x: x + x, num_different_graphs_allowed=1)
    for _ in range(3):
        x = torch.rand(10)
        torch.testing.assert_close(f(x.to(dev)).cpu(), x + x)


def test_new_shape_over_limit_names_the_shape(dev):
    def foo(x):
        return x + x
    f = torch_xla.compile(foo, num_different_graphs_allowed=1)
    f(torch.rand(10, device=dev))
    with pytest.raises(RuntimeError) as e:
        f(torch.rand(5, device=dev))
    msg = str(e.value)
    assert "Maximum number of different graphs allowed per function exceeded: 1" in msg
    assert "Got: [] aten::add, xla_shape=f32[5]{0}, dynamic_dims: ()" in msg
    assert "Expected: [] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()" in msg
    assert "foo" in msg


def test_new_op_over_limit_upstream_spelling(dev):
    def foo(x, step):
        return x + x if step == 0 else x * 5
    f = torch_xla.compile(foo, max_different_graphs=2)
    x = torch.rand(10, device=dev)
    f(x, 0)
    f(x, 1)
    f(x, 0)
    with pytest.raises(RuntimeError, match="Maximum number of different graphs allowed per function exceeded: 2"):
        f(torch.rand(3, device=dev), 1)


def test_experimental_alias(dev):
    import torch_xla.experimental as exp
    f = exp.compile(lambda x: x * 2)
    torch.testing.assert_close(f(torch.ones(2, device=dev)).cpu(), torch.full((2,), 2.0))


def test_the_limit_counts_per_function_and_lists_every_branch_at_a_fork():
    # a fresh torch_xla.compile wrapper around the same function shares its
    # count; at a fork the message lists what each earlier graph did next
    import pytest
    import torch
    import torch_xla

    def foo(x, step):
        r = x + x
        if step == 0:
            return r * 2
        if step == 1:
            return r + x
        return r / 3

    x = torch.rand(10, device="xla")
    for step in (0, 1):
        torch_xla.compile(foo, max_different_graphs=2)(x, step)
    with pytest.raises(RuntimeError) as err:
        torch_xla.compile(foo, max_different_graphs=2)(x, 2)
    msg = str(err.value)
    assert "Got: [] aten::div, xla_shape=f32[10]{0}, dynamic_dims: ()" in msg
    assert ("Expected either of:\n  - [] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()\n"
            "  - [] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()") in msg
