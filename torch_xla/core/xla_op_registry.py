"""Register a computation written with `torch_xla.core.xla_builder.Op` as a
callable on XLA tensors.

`register(name, opfn)` gives an `Op` object; calling it with tensors (and keyword
arguments, which are passed to `opfn` unchanged and are part of the compilation
key) runs `opfn` on the tensors' values through `xla_builder.call_jax`: eagerly,
outside the lazy graph (see that module)."""
import torch

from . import xla_builder as xb


class Op:
    """A named user computation: `op(*tensors, **kwargs)` -> tensor or tuple."""

    def __init__(self, name, opfn):
        self.name = name
        self.opfn = opfn
        self._fns = {}

    def _jax_fn(self, kwargs_key, kwargs):
        fn = self._fns.get(kwargs_key)
        if fn is None:
            opfn, name = self.opfn, self.name

            def fn(*arrays):
                builder = xb.create_builder(name)
                ops = [xb.Op(a, builder) for a in arrays]
                return xb._unwrap(opfn(*ops, **kwargs))
            fn.__name__ = name
            self._fns[kwargs_key] = fn
        return fn

    def __call__(self, *args, **kwargs):
        for a in args:
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"xla_op_registry.Op {self.name!r}: positional arguments must be "
                                f"tensors (got {type(a).__name__}); pass other values by keyword")
        try:
            key = tuple(sorted(kwargs.items()))
            hash(key)
        except TypeError:
            key = id(kwargs)
        out = xb.call_jax(self._jax_fn(key, kwargs), args, name=self.name)
        if isinstance(out, list):
            out = tuple(out)
        return out


def register(name, opfn):
    """The callable `Op` running `opfn` (a function of `xla_builder.Op` values)."""
    return Op(name, opfn)
