"""torch_xla.experimental.scan: a loop over the leading dimension of tensors,
compiled as one `lax.scan` node of the step graph.

`fn` is traced once per call on placeholder tensors (one iteration's worth of
carry and x), so the compiled program holds one copy of the loop body however
long the loop is. Gradients flow to `init`, `xs` and to every tensor `fn`
closes over (weights): the backward is one node, the `jax.vjp` of the scan
(a forward scan keeping the residuals, then a reverse scan).
"""
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.engine import api

__all__ = ["scan"]


def scan(fn, init, xs, partition_fn=None, is_fn_pure=False):
    """Run `fn(carry, x) -> (carry, y)` over the leading dimension of `xs`.

    Same result as::

        carry, ys = init, []
        for i in range(len(xs)):
            carry, y = fn(carry, xs[i])
            ys.append(y)
        return carry, torch.stack(ys)

    with PyTrees (tuples, lists, dicts) of XLA tensors for the carry, `xs` (every
    leaf sliced along dim 0, all of the same length) and `y` (every leaf stacked).
    The carry `fn` returns must keep the structure, shapes and dtypes of `init`.

    `partition_fn` (upstream's AOTAutograd partitioner) is accepted and not used:
    which activations are kept for the backward is decided by XLA from the
    `jax.vjp` of the loop. `is_fn_pure` is accepted too; `fn` is traced on every
    call (a trace reuses the lowering memo, so it is cheap).

    Randomness inside `fn` that does not depend on the carry or x is drawn once
    and shared by every iteration; a tensor `fn` closes over must not be written
    in place.
    """
    if not callable(fn):
        raise ValueError(f"`fn` {fn} must be callable.")
    del partition_fn, is_fn_pure
    init_leaves, init_spec = tree_flatten(init)
    x_leaves, x_spec = tree_flatten(xs)
    if not x_leaves:
        raise ValueError(f"`xs` {xs} is an empty PyTree.")
    length = len(x_leaves[0])
    for leaf in x_leaves:
        if len(leaf) != length:
            raise ValueError("The leaves of the `xs` input PyTree must have the same leading "
                             f"dimension size. Got {length} and {len(leaf)}")
    for leaf in init_leaves + x_leaves:
        if not api.is_xla_tensor(leaf):
            raise ValueError(f"scan: init and xs must hold XLA tensors, got {type(leaf).__name__} "
                             f"on {getattr(leaf, 'device', None)}")
    nc = len(init_leaves)
    y_spec = []

    def flat_fn(*args):
        carry = tree_unflatten(list(args[:nc]), init_spec)
        x = tree_unflatten(list(args[nc:]), x_spec)
        out = fn(carry, x)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError("scan: fn must return a pair (carry, y)")
        new_carry, y = out
        c_leaves, c_spec = tree_flatten(new_carry)
        if c_spec != init_spec:
            raise ValueError(f"scan: fn returned a carry of structure {c_spec}, init has {init_spec}")
        y_leaves, spec = tree_flatten(y)
        y_spec.append((spec, [v is None for v in y_leaves]))
        return list(c_leaves) + [v for v in y_leaves if v is not None]

    carry, ys = api.scan(flat_fn, nc, init_leaves, x_leaves)
    spec, holes = y_spec[-1]
    it = iter(ys)
    ys = [None if hole else next(it) for hole in holes]
    return tree_unflatten(carry, init_spec), tree_unflatten(ys, spec)
