"""Calling JAX from a PyTorch/XLA program.

`call_jax(jax_fn, args, kwargs)` puts a JAX function into the traced graph as
one node: XLA tensors among the arguments (any PyTree) reach it as JAX arrays,
other values as themselves (static: a new value is a new graph). The output
shapes come from `jax.eval_shape`; the result has XLA tensors where the JAX
function returns arrays. The node is differentiable: its backward is another
node running the `jax.vjp` of `jax_fn`.

`torch_xla.core.xla_builder.call_jax` is this function.
"""
from torch_xla.engine import api

__all__ = ["call_jax"]


def call_jax(jax_fn, args, kwargs=None, name=None, override_hash=None):
    """Call `jax_fn(*args, **kwargs)` inside the graph; -> its result with XLA
    tensors for arrays.

    `jax_fn` must be pure and traceable by `jax.jit`. The compiled node is
    cached by `jax_fn` itself (or `override_hash` when given: use it for a
    function remade in a closure on every call), the argument structure, the
    tensors' shapes and dtypes and the non-tensor values. `name` names the node
    (`xla::call_jax_<name>` in IR dumps)."""
    key = jax_fn if override_hash is None else _Keyed(jax_fn, override_hash)
    return api.call_jax(key, tuple(args), kwargs, name)


class _Keyed:
    """jax_fn keyed by a user-given value instead of its identity."""
    __slots__ = ("fn", "key")

    def __init__(self, fn, key):
        self.fn = fn
        self.key = key

    def __call__(self, *a, **k):
        return self.fn(*a, **k)

    def __eq__(self, other):
        return type(other) is _Keyed and self.key == other.key

    def __hash__(self):
        return hash(("override_hash", self.key))

    def __repr__(self):
        return f"call_jax_key({self.key!r})"
