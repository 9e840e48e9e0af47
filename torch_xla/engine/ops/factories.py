"""Factory rules: empty/zeros/ones/full/arange/linspace/eye and *_like, new_*.

Shapes and dtypes come from PyTorch's meta kernels (ctx.entry.out_avals).
`empty*` gives zeros: XLA has no uninitialised memory, and zeros are free.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

from .context import out_dtype, out_shape
from .numerics import cast
from .registry import ctx, lower




@lower("empty.memory_format", "empty_strided", "empty_permuted", "zeros", "empty_like", "zeros_like",
       "new_empty", "new_empty_strided", "new_zeros", "empty.names", "zeros.names")
def _zeros(*args, **kwargs):
    return jnp.zeros(out_shape(), out_dtype())


@lower("ones", "ones_like", "new_ones", "ones.names")
def _ones(*args, **kwargs):
    return jnp.ones(out_shape(), out_dtype())


@lower("full")
def _full(size, fill_value, **kwargs):
    return jnp.full(out_shape(), fill_value, out_dtype())


@lower("full_like")
def _full_like(x, fill_value, **kwargs):
    return jnp.full(out_shape(), fill_value, out_dtype())


@lower("new_full")
def _new_full(x, size, fill_value, **kwargs):
    return jnp.full(out_shape(), fill_value, out_dtype())


@lower("scalar_tensor")
def _scalar_tensor(s, **kwargs):
    dt = out_dtype()
    if isinstance(s, int) and not isinstance(s, bool) and jnp.issubdtype(dt, jnp.integer):
        # eager's checked conversion (c10::overflows): a signed dtype takes [min, max], an
        # unsigned one [-max, max], wrapping (`t[i] = -1` on uint8 writes 255)
        info = np.iinfo(dt)
        lo = info.min if info.min < 0 else -int(info.max)
        if not lo <= s <= info.max:
            name = {1: "int8_t", 2: "int16_t", 4: "int", 8: "int64_t"}[info.bits // 8] if info.min < 0 \
                else f"uint{info.bits}_t"
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
        return jnp.asarray(np.asarray(s, np.int64).astype(dt))
    return jnp.asarray(s, dt)


@lower("arange", "arange.start", "arange.start_step")
def _arange(*args, **kwargs):
    nums = [a for a in args if isinstance(a, (int, float))]
    if len(nums) == 1:
        start, end, step = 0, nums[0], 1
    elif len(nums) == 2:
        (start, end), step = nums, 1
    else:
        start, end, step = nums[:3]
    dt = out_dtype()
    n = out_shape()[0]
    if jnp.issubdtype(dt, jnp.integer) and all(isinstance(v, int) for v in (start, step)):
        return (start + step * jnp.arange(n, dtype=jnp.int64)).astype(dt)
    return (start + step * jnp.arange(n, dtype=jnp.float64)).astype(dt)


@lower("linspace", "linspace.Tensor_Tensor", "linspace.Tensor_Scalar", "linspace.Scalar_Tensor")
def _linspace(start, end, steps, **kwargs):
    dt = out_dtype()
    if jnp.issubdtype(dt, jnp.integer):
        return jnp.linspace(start, end, steps, dtype=jnp.float64).astype(dt)
    return jnp.linspace(start, end, steps, dtype=jnp.float64 if dt == jnp.float64 else jnp.float32).astype(dt)


@lower("logspace")
def _logspace(start, end, steps, base=10.0, **kwargs):
    return jnp.logspace(start, end, steps, base=base, dtype=jnp.float64).astype(out_dtype())


@lower("eye", "eye.m")
def _eye(n, m=None, **kwargs):
    r, c = out_shape()
    # a select, not jnp.eye's convert of the diagonal mask (numerics.cast)
    return cast(lax.broadcasted_iota(jnp.int64, (r, c), 0) == lax.broadcasted_iota(jnp.int64, (r, c), 1), out_dtype())


@lower("tril_indices", "triu_indices")
def _tri_indices(row, col, offset=0, **kwargs):
    import numpy as np
    upper = ctx.entry.name.startswith("triu")
    r, c = (np.triu_indices if upper else np.tril_indices)(row, offset, col)
    return jnp.asarray(np.stack([r, c]), out_dtype())


@lower("_efficientzerotensor")
def _efficient_zeros(size, **kwargs):
    return jnp.zeros(out_shape(), out_dtype())


