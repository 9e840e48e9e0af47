"""torch_xla.experimental.scan: a loop over the leading dimension of tensors,
compiled as one `lax.scan` node of the step graph.

`fn` is traced once per call on placeholder tensors (one iteration's worth of
carry and x), so the compiled program holds one copy of the loop body however
long the loop is. Gradients flow to `init`, `xs` and to every tensor `fn`
closes over (weights): the backward is one node, the `jax.vjp` of the scan
(a forward scan keeping the residuals, then a reverse scan).
"""
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.engine import api

__all__ = ["scan", "value_and_grad_partitioned", "tree_flatten_none"]

# fn -> {(input structure and avals, partition_fn): (forward, alias_input, backward)},
# filled for functions declared pure (is_fn_pure=True); their traced loop body is
# reused from _BODIES instead of tracing fn again
_SCAN_COMPUTATION_CACHE = {}
_BODIES = {}


def tree_flatten_none(pytree):
    """(the leaves of `pytree` that are not None, a function rebuilding the tree
    from such a list with the Nones back in place)."""
    leaves, spec = tree_flatten(pytree)
    holes = [v is None for v in leaves]

    def unflatten(values):
        it = iter(values)
        return tree_unflatten([None if h else next(it) for h in holes], spec)
    return [v for v in leaves if v is not None], unflatten


def _avals_key(tree):
    leaves, spec = tree_flatten(tree)
    return spec, tuple((tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v for v in leaves)


def value_and_grad_partitioned(fn, init, xs, partition_fn=None, is_fn_pure=True):
    """Split one step of `fn(carry, x) -> (new_carry, y)` into three functions:

    - `forward(carry, x) -> (new_carry, (y, partial_activations))`,
    - `alias_input(partial_activations, x) -> activations`, adding back the
      activations that are the inputs `x` themselves (it works on one step's
      values or on stacks of them over the scanned dimension),
    - `backward(grad_new_carry, (grad_y, activations)) -> (grad_carry, grad_x)`.

    `init` and `xs` (stacked over the leading dimension) give the structure.
    The activations kept here are the step's inputs, carry then x (what
    PyTorch's default partitioner keeps for a matmul); the backward recomputes
    the step from them under autograd, so any `partition_fn` gives the same
    gradients and is accepted for compatibility."""
    del partition_fn, is_fn_pure
    carry_leaves, carry_spec = tree_flatten(init)
    x_leaves, x_spec = tree_flatten(xs)
    nc = len(carry_leaves)
    # one step traced now checks fn's contract (a pair, the carry keeping init's
    # structure) here rather than deep inside the first backward; nothing runs
    with torch.no_grad():
        out = fn(init, tree_unflatten([v[0] for v in x_leaves], x_spec))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ValueError("value_and_grad_partitioned: fn must return a pair (new_carry, y)")
    if tree_flatten(out[0])[1] != carry_spec:
        raise ValueError(f"value_and_grad_partitioned: fn returned a carry of structure {tree_flatten(out[0])[1]}, "
                         f"init has {carry_spec}")
    del out

    def forward(carry, x):
        with torch.no_grad():
            new_carry, y = fn(carry, x)
        return new_carry, (y, tuple(tree_flatten(carry)[0]))

    def alias_input(partial_activations, x):
        return tuple(partial_activations) + tuple(tree_flatten(x)[0])

    def backward(grad_carry_out, grad_y_and_activations):
        grad_y, activations = grad_y_and_activations
        activations = list(activations)
        inputs = [a.detach().requires_grad_(a.is_floating_point() or a.is_complex()) for a in activations]
        carry = tree_unflatten(inputs[:nc], carry_spec)
        x = tree_unflatten(inputs[nc:], x_spec)
        with torch.enable_grad():
            new_carry, y = fn(carry, x)
        outs, grads = [], []
        for o, g in zip(tree_flatten((new_carry, y))[0], tree_flatten((grad_carry_out, grad_y))[0]):
            if isinstance(o, torch.Tensor) and o.requires_grad and g is not None:
                outs.append(o)
                grads.append(g)
        wrt = [t for t in inputs if t.requires_grad]
        got = iter(torch.autograd.grad(outs, wrt, grads, allow_unused=True) if outs and wrt else [])
        result = []
        for t in inputs:
            g = next(got) if t.requires_grad else None
            result.append(torch.zeros_like(t) if g is None else g)
        return tree_unflatten(result[:nc], carry_spec), tree_unflatten(result[nc:], x_spec)

    return forward, alias_input, backward


def _recomputes(partition_fn):
    if partition_fn is None:
        return False
    try:
        from functorch.compile import default_partition
    except ImportError:  # pragma: no cover
        default_partition = None
    return partition_fn is not default_partition


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

    `partition_fn` (upstream's AOTAutograd partitioner) chooses what the backward
    keeps: the default keeps the residuals of each iteration's `jax.vjp` (stacked
    over the loop); any other partitioner (`min_cut_rematerialization_partition`)
    keeps only the carry of each iteration and recomputes the rest in the
    backward loop (`jax.checkpoint` of the body: less memory, a smaller program
    that compiles faster, more compute). With `is_fn_pure=True` (fn reads nothing but its
    arguments and changes nothing), the traced loop body and fn's
    `value_and_grad_partitioned` functions are cached by fn and the inputs'
    shapes (`_SCAN_COMPUTATION_CACHE`), so a later call traces nothing; otherwise
    fn is traced on every call.

    Random ops inside `fn` draw new numbers in every iteration and every call
    (reproducible under `torch.manual_seed`); a tensor `fn` closes over must not
    be written in place (refused with an error: the write would happen once).
    """
    if not callable(fn):
        raise ValueError(f"`fn` {fn} must be callable.")
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
    bodies = None
    if is_fn_pure:
        key = (_avals_key(init), _avals_key(xs), partition_fn)
        entries = _SCAN_COMPUTATION_CACHE.setdefault(fn, {})
        if key not in entries:
            entries[key] = value_and_grad_partitioned(fn, init, xs, partition_fn)
        bodies = _BODIES.setdefault((fn, key), {})
        if "y_spec" in bodies:
            y_spec.append(bodies["y_spec"])

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

    carry, ys = api.scan(flat_fn, nc, init_leaves, x_leaves, body_cache=bodies,
                         remat=_recomputes(partition_fn))
    if bodies is not None:
        bodies.setdefault("y_spec", y_spec[-1])
    spec, holes = y_spec[-1]
    it = iter(ys)
    ys = [None if hole else next(it) for hole in holes]
    return tree_unflatten(carry, init_spec), tree_unflatten(ys, spec)
