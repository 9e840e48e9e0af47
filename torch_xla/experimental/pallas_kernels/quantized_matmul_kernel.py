"""Int8-weight matmul (w8a16, or w8a8 with `quantize_activation`): upstream's
`quantized_matmul_kernel`, on JAX arrays.

JAX ships no Pallas kernel for it, so `quantized_matmul_int8` is one XLA
computation on every platform: an int8 x int8 -> int32 dot when the activation
is quantized, a float32 dot otherwise. Beyond upstream's kernel it takes
zero points and block-wise weight scales (see `quantized_matmul_int8`).
torch_xla.experimental.custom_kernel.quantized_matmul_int8 runs the same
computation. The block sizes only tile upstream's TPU kernel; they are kept in
the signature, and `TUNED_BLOCK_SIZES` / `get_tuned_block_sizes` keep
upstream's lookup (its keys and the (None, None, None) miss).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.experimental.pallas_kernels import _registry

_HIGHEST = jax.lax.Precision.HIGHEST


def _concrete_int(v):
    """v's value when known without a device read (a Python or NumPy integer,
    a concrete JAX array of one element), else None."""
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (np.ndarray, jax.Array)) and not isinstance(v, jax.core.Tracer) and v.size == 1:
        return int(np.asarray(v).reshape(-1)[0])
    return None


def _blocks(x, w, scalar, zero_point, quant_block_size):
    """The number of weight-scale blocks along the input features, with the
    argument shapes checked (ValueError)."""
    out_f, in_f = w.shape
    if x.shape[-1] != in_f:
        raise ValueError(f"x's last dimension ({x.shape[-1]}) must be w's input features ({in_f})")
    if quant_block_size is None:
        if tuple(scalar.shape) != (out_f,):
            raise ValueError(f"per-channel scales must be [{out_f}] (w's output features), got {tuple(scalar.shape)}")
        n_blocks = 1
    else:
        if scalar.ndim != 2 or scalar.shape[1] != out_f or in_f % scalar.shape[0]:
            raise ValueError(f"block-wise scales must be [in_features / quant_block_size, {out_f}], got "
                             f"{tuple(scalar.shape)}")
        n_blocks = scalar.shape[0]
        size = _concrete_int(quant_block_size)
        if size is not None:
            if size * n_blocks != in_f:
                raise ValueError(f"quant_block_size {size} does not match scales {tuple(scalar.shape)} for "
                                 f"{in_f} input features")
    if zero_point is not None and tuple(zero_point.shape) != tuple(scalar.shape):
        raise ValueError(f"zero_point must have the scales' shape {tuple(scalar.shape)}, got "
                         f"{tuple(zero_point.shape)}")
    return n_blocks


@_registry.register("quantized_matmul_int8")
def _reference(x, w, scalar, zero_point=None, quant_block_size=None, quantize_activation=False, **_tuning):
    n_blocks = _blocks(x, w, scalar, zero_point, quant_block_size)
    lead = x.shape[:-1]
    out_f, in_f = w.shape
    f32 = jnp.float32
    lhs = x.reshape(-1, in_f).astype(f32)
    if quantize_activation:
        # per row, to int8 with scale max|x| / 127
        x_scale = jnp.max(jnp.abs(lhs), axis=-1, keepdims=True) / 127.0
        lhs = jnp.round(lhs / x_scale)
    per_block = (lhs.shape[0], n_blocks, in_f // n_blocks)
    wb = w.reshape(out_f, n_blocks, in_f // n_blocks)
    if quantize_activation:
        acc = jnp.einsum("bnc,onc->bno", lhs.astype(jnp.int8).reshape(per_block), wb.astype(jnp.int8),
                         preferred_element_type=jnp.int32).astype(f32)
    else:
        acc = jnp.einsum("bnc,onc->bno", lhs.reshape(per_block), wb.astype(f32), precision=_HIGHEST)
    scales = scalar.astype(f32).reshape(n_blocks, out_f)
    out = jnp.sum(acc * scales[None], axis=1) if n_blocks > 1 else acc[:, 0] * scales[0]
    if zero_point is not None:
        sums = jnp.sum(lhs.reshape(per_block), axis=-1)                     # [rows, n_blocks]
        out = out - jnp.dot(sums, zero_point.astype(f32).reshape(n_blocks, out_f), precision=_HIGHEST)
    if quantize_activation:
        out = out * x_scale
    return out.reshape(*lead, out_f).astype(x.dtype)


@functools.partial(jax.jit, static_argnames=["quantize_activation", "batch_block_size", "out_block_size",
                                             "in_block_size"])
def quantized_matmul_int8(
    x,                               # [bs, n_input_features]
    w,                               # int8 [n_output_features, n_input_features]
    scalar,                          # [n_output_features], or [n_input_features / block, n_output_features]
    zero_point=None,                 # None, or the scales' shape
    quant_block_size=None,           # None (per-channel), or i32[1] / int: input features per scale block
    quantize_activation: bool = False,
    *,
    batch_block_size: int | None = None,
    out_block_size: int | None = None,
    in_block_size: int | None = None,
):
    """x @ dequant(w).T in x's dtype, where dequant(w)[o, c] =
    w[o, c] * scalar[o] - zero_point[o] (per-channel), or with the scale and
    zero point of c's block, scalar[c // quant_block_size, o] (block-wise;
    the block count is read from scalar's shape). With quantize_activation, x
    is first quantized per row to int8 (scale max|x| / 127), the products are
    int8 x int8 -> int32, and the result is rescaled by x's scale.

    As upstream's kernel, the three block sizes must be given (they tile the
    TPU kernel; the result does not depend on them)."""
    assert batch_block_size is not None and out_block_size is not None and in_block_size is not None, \
        "batch_block_size, out_block_size and in_block_size must be given (see get_tuned_block_sizes)"
    return _registry.call("quantized_matmul_int8", _registry.current_platform(), x, w, scalar, zero_point,
                          quant_block_size, quantize_activation)


# key: (tpu_version, batch_size, n_output_features, n_input_features, activation_dtype, quantize_activation)
# value: (batch_block_size, out_block_size, in_block_size). A few transformer
# layer shapes on TPU v6; the blocks keep a whole input row and split the
# output features into the largest multiple of 256 up to 2048 dividing them.
def _blocks_for(bs, n_out, n_in):
    out_block = max(b for b in range(256, 2049, 256) if n_out % b == 0)
    return (min(bs, 512), out_block, n_in)


TUNED_BLOCK_SIZES = {
    (6, bs, n_out, n_in, "bfloat16", True): _blocks_for(bs, n_out, n_in)
    for bs in (128, 1024)
    for n_out, n_in in ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336))
}


def get_tpu_version() -> int:
    """The TPU generation of the first device (6 for a v6e), -1 off a TPU."""
    kind = jax.devices()[0].device_kind
    if "TPU" not in kind:
        return -1
    digits = "".join(ch for ch in kind.removeprefix("TPU v").split()[0] if ch.isdigit())
    return int(digits) if digits else -1


def get_tuned_block_sizes(block_table, batch_size, n_output_features, n_input_features, activation_dtype,
                          quantize_activation):
    """block_table's (batch_block_size, out_block_size, in_block_size) for this
    TPU and problem, or (None, None, None)."""
    key = (get_tpu_version(), batch_size, n_output_features, n_input_features, activation_dtype,
           quantize_activation)
    return block_table.get(key, (None, None, None))
