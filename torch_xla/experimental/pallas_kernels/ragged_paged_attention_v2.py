"""Ragged paged attention (mixed prefill and decode) over a K/V-interleaved
paged cache: upstream's `ragged_paged_attention_v2`, on JAX arrays.

`ragged_paged_attention` runs JAX's Pallas TPU kernel
(`jax.experimental.pallas.ops.tpu.ragged_paged_attention`, the same kernel)
when lowered for a TPU, and the exact XLA reference `ref_ragged_paged_attention`
everywhere else. The kernel's tuning helpers (`get_tuned_block_sizes`,
`TUNED_BLOCK_SIZES`, ...) are JAX's, looked up on first use so that importing
this module imports no Pallas code.
"""
import functools

import jax
import jax.numpy as jnp

from torch_xla.experimental.pallas_kernels import _registry

DEFAULT_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.dtype("float32")).max)
_HIGHEST = jax.lax.Precision.HIGHEST
# elements of gathered K/V and logits one vectorized step of the reference may hold
_REFERENCE_CHUNK_ELEMENTS = 1 << 24

_JAX_KERNEL = "jax.experimental.pallas.ops.tpu.ragged_paged_attention.kernel"
_JAX_TUNING = "jax.experimental.pallas.ops.tpu.ragged_paged_attention.tuned_block_sizes"
# names served by JAX's modules (the same helpers upstream's module defines)
_LAZY = {
    "TUNED_BLOCK_SIZES": _JAX_TUNING, "MAX_PAGES_PER_SEQ": _JAX_TUNING, "get_tuned_block_sizes": _JAX_TUNING,
    "simplify_key": _JAX_TUNING, "get_tpu_version": _JAX_TUNING, "get_device_name": _JAX_TUNING,
    "get_min_page_size": _JAX_TUNING, "get_min_heads_per_blk": _JAX_KERNEL, "ragged_paged_attention_kernel": _JAX_KERNEL,
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)


def cdiv(a, b):
    assert b != 0
    return (a + b - 1) // b


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= x (x > 0)."""
    assert x > 0
    return 1 << (x - 1).bit_length()


def get_dtype_packing(dtype) -> int:
    """How many values of `dtype` share a 32-bit word."""
    return 32 // (8 * jnp.dtype(dtype).itemsize)


# ---------------------------------------------------------------------------
# the reference, shared with the first version's module and custom_kernel

def soft_cap_logits(logits, cap):
    """cap * tanh(logits / cap); logits unchanged when cap is None."""
    return logits if cap is None else jnp.tanh(logits / cap) * cap


def ragged_attention(q, gather_kv, kv_lens, cu_q_lens, num_seqs, max_num_seqs, *, sm_scale=1.0,
                     sliding_window=None, soft_cap=None, mask_value=DEFAULT_MASK_VALUE, kv_len_bound):
    """Causal attention of a flat batch of tokens from several sequences.

    q [T, Hq, D]; sequence s < num_seqs (a traced scalar) owns the rows
    cu_q_lens[s]:cu_q_lens[s + 1] and has kv_lens[s] cached tokens, of which
    its queries are the last: a token at offset i of its sequence sits at
    position kv_lens[s] - q_len + i and sees positions <= its own (and >
    position - sliding_window). `gather_kv(s)` -> (k, v), each
    [kv_len_bound, KVH, D], sequence s's cache (Hq a multiple of KVH; query
    head h uses kv head h // (Hq // KVH)). Logits are (q . k) * sm_scale,
    soft-capped, accumulated in float32. Rows of no sequence come back zero.
    Tokens are processed in vectorized chunks, so memory stays bounded for
    long caches."""
    t, hq, d = q.shape
    s = max_num_seqs
    n = jnp.asarray(num_seqs, jnp.int32).reshape(-1)[0]
    cu = cu_q_lens.astype(jnp.int32)
    kv_lens = kv_lens.astype(jnp.int32)
    tok = jnp.arange(t, dtype=jnp.int32)
    active = jnp.arange(s) < n
    # the sequence of each token: how many active sequences end at or before it
    seq = jnp.sum((cu[1:s + 1][None, :] <= tok[:, None]) & active[None, :], axis=1, dtype=jnp.int32)
    seq = jnp.minimum(seq, s - 1)
    valid = tok < cu[n]
    q_start = cu[seq]
    q_len = cu[seq + 1] - q_start
    kv_len = kv_lens[seq]
    pos = kv_len - q_len + (tok - q_start)

    def one(args):
        q_t, s_t, pos_t, len_t = args                     # [Hq, D], scalars
        k, v = gather_kv(s_t)                             # [L, KVH, D]
        kvh = k.shape[1]
        qg = q_t.reshape(kvh, hq // kvh, d)
        logits = jnp.einsum("grd,lgd->grl", qg, k, precision=_HIGHEST, preferred_element_type=jnp.float32)
        logits = soft_cap_logits(logits * sm_scale, soft_cap)
        j = jnp.arange(k.shape[0])
        allowed = (j <= pos_t) & (j < len_t)
        if sliding_window is not None:
            allowed = allowed & (j > pos_t - sliding_window)
        logits = jnp.where(allowed, logits, mask_value)
        w = jax.nn.softmax(logits, axis=-1)
        return jnp.einsum("grl,lgd->grd", w, v.astype(jnp.float32), precision=_HIGHEST).reshape(hq, d)

    per_token = kv_len_bound * (2 * d * max(1, hq) + hq)
    chunk = max(1, min(t, _REFERENCE_CHUNK_ELEMENTS // max(1, per_token)))
    out = jax.lax.map(one, (q, seq, pos, kv_len), batch_size=chunk)
    return jnp.where(valid[:, None, None], out, 0).astype(q.dtype)


def _reference(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, sm_scale=1.0, sliding_window=None,
               soft_cap=None, mask_value=None, k_scale=None, v_scale=None, **_tuning):
    _, page_size, combined, d = kv_pages.shape
    max_num_seqs, pages_per_seq = page_indices.shape

    def gather(s):
        kv = kv_pages[page_indices[s]].reshape(pages_per_seq * page_size, combined, d)
        k, v = kv[:, 0::2], kv[:, 1::2]                  # heads interleave k, v
        if k_scale is not None:
            k = (k.astype(jnp.float32) * k_scale).astype(q.dtype)
        if v_scale is not None:
            v = (v.astype(jnp.float32) * v_scale).astype(q.dtype)
        return k, v

    return ragged_attention(q, gather, kv_lens, cu_q_lens, num_seqs, max_num_seqs, sm_scale=sm_scale,
                            sliding_window=sliding_window, soft_cap=soft_cap,
                            mask_value=DEFAULT_MASK_VALUE if mask_value is None else mask_value,
                            kv_len_bound=pages_per_seq * page_size)


_registry.register("ragged_paged_attention")(_reference)


@_registry.register("ragged_paged_attention", platform="tpu")
def _tpu(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention as kernel
    return kernel(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw)


# ---------------------------------------------------------------------------
# upstream's public functions

def static_validate_inputs(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, sm_scale=None,
                           sliding_window=None, soft_cap=None, mask_value=None, k_scale=None, v_scale=None,
                           num_kv_pages_per_block=None, num_queries_per_block=None, vmem_limit_bytes=None):
    """Shape, dtype and option checks that need no values (ValueError). Index
    arrays may be any integer type (int64 is JAX's default once torch_xla has
    enabled x64); ragged_paged_attention uses them as int32."""
    _, hq, d = q.shape
    _, _, combined, d_kv = kv_pages.shape
    if combined % 2:
        raise ValueError(f"kv_pages' head axis ({combined}) must interleave K and V heads (even)")
    if not (k_scale is None or isinstance(k_scale, float)) or not (v_scale is None or isinstance(v_scale, float)):
        raise ValueError("k_scale and v_scale must be floats or None")
    max_num_seqs, pages_per_seq = page_indices.shape
    if tuple(num_seqs.shape) != (1,):
        raise ValueError(f"num_seqs.shape={tuple(num_seqs.shape)} must be (1,)")
    if d_kv != d:
        raise ValueError(f"Q head_dim {d} must be the same as that of K/V {d_kv}.")
    if tuple(kv_lens.shape) != (max_num_seqs,):
        raise ValueError(f"kv_lens.shape={tuple(kv_lens.shape)} must be ({max_num_seqs},), page_indices' rows")
    if tuple(cu_q_lens.shape) != (max_num_seqs + 1,):
        raise ValueError(f"cu_q_lens.shape={tuple(cu_q_lens.shape)} must be ({max_num_seqs + 1},)")
    for name, a in (("kv_lens", kv_lens), ("page_indices", page_indices), ("cu_q_lens", cu_q_lens)):
        if not jnp.issubdtype(a.dtype, jnp.integer):
            raise ValueError(f"The dtype of `{name}` must be int32, got {a.dtype}.")
    if hq % (combined // 2):
        raise ValueError(f"num_q_heads={hq} must be divisible by num_kv_heads={combined // 2}")
    if sliding_window is not None and sliding_window <= 0:
        raise ValueError(f"sliding_window={sliding_window} must be positive.")
    if soft_cap is not None and soft_cap == 0.0:
        raise ValueError("soft_cap must not be 0.0.")
    if num_kv_pages_per_block is not None and not 0 < num_kv_pages_per_block <= pages_per_seq:
        raise ValueError(f"num_kv_pages_per_block={num_kv_pages_per_block} must be in (0, {pages_per_seq}].")
    if num_queries_per_block is not None and num_queries_per_block <= 0:
        raise ValueError(f"num_queries_per_block={num_queries_per_block} must be positive.")
    if vmem_limit_bytes is not None and vmem_limit_bytes <= 0:
        raise ValueError(f"vmem_limit_bytes={vmem_limit_bytes} must be positive.")


def dynamic_validate_inputs(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw):
    """static_validate_inputs plus the checks that read the (concrete) values:
    num_seqs within the rows, every cache fitting its pages, the tokens within
    q, and no sequence with more queries than cached tokens."""
    static_validate_inputs(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw)
    n = int(num_seqs[0])
    max_num_seqs, pages_per_seq = page_indices.shape
    page_size = kv_pages.shape[1]
    if n > max_num_seqs:
        raise ValueError(f"num_seqs[0]={n} must be less or equal to max_num_seqs={max_num_seqs}")
    max_kv = int(jnp.max(kv_lens))
    if pages_per_seq < cdiv(max_kv, page_size):
        raise ValueError(f"pages_per_seq={pages_per_seq} must be at least {cdiv(max_kv, page_size)} "
                         f"for max kv_len {max_kv} and page_size {page_size}.")
    if int(cu_q_lens[n]) > q.shape[0]:
        raise ValueError(f"Total q tokens {int(cu_q_lens[n])} must be less or equal to {q.shape[0]}.")
    for i in range(n):
        q_len, kv_len = int(cu_q_lens[i + 1] - cu_q_lens[i]), int(kv_lens[i])
        if q_len > kv_len:
            raise ValueError(f"q_len={q_len} must be less or equal to kv_len={kv_len} at sequence {i}.")


def ref_ragged_paged_attention(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, sm_scale=1.0,
                               sliding_window=None, soft_cap=None, mask_value=DEFAULT_MASK_VALUE, k_scale=None,
                               v_scale=None):
    """The XLA reference of ragged_paged_attention (same arguments, no tuning)."""
    static_validate_inputs(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
                           sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
                           k_scale=k_scale, v_scale=v_scale)
    return _reference(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
                      sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
                      k_scale=k_scale, v_scale=v_scale)


@functools.partial(jax.jit, static_argnames=["sm_scale", "mask_value", "num_kv_pages_per_block",
                                             "num_queries_per_block", "vmem_limit_bytes", "sliding_window",
                                             "soft_cap", "k_scale", "v_scale"])
def ragged_paged_attention(
    q,              # [max_num_batched_tokens, num_q_heads, head_dim]
    kv_pages,       # [total_num_pages, page_size, 2 * num_kv_heads, head_dim]: K and V heads interleaved
    kv_lens,        # i32[max_num_seqs]
    page_indices,   # i32[max_num_seqs, pages_per_seq]
    cu_q_lens,      # i32[max_num_seqs + 1]
    num_seqs,       # i32[1]
    *,
    sm_scale: float = 1.0,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    mask_value: float | None = DEFAULT_MASK_VALUE,
    k_scale: float | None = None,
    v_scale: float | None = None,
    num_kv_pages_per_block: int | None = None,
    num_queries_per_block: int | None = None,
    vmem_limit_bytes: int | None = None,
):
    """Attention for a flat batch of tokens from num_seqs[0] sequences: sequence
    s owns rows cu_q_lens[s]:cu_q_lens[s+1] of q and kv_lens[s] cached tokens
    in pages page_indices[s]; each token attends causally (within
    sliding_window) to its sequence's cache. Logits are scaled by sm_scale,
    then soft-capped. -> [max_num_batched_tokens, num_q_heads, head_dim]; rows
    past the last sequence's tokens are zero (the reference) or unspecified
    (the TPU kernel). The block sizes and VMEM limit tune the TPU kernel only."""
    kw = dict(sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
              k_scale=k_scale, v_scale=v_scale)
    static_validate_inputs(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, **kw,
                           num_kv_pages_per_block=num_kv_pages_per_block,
                           num_queries_per_block=num_queries_per_block, vmem_limit_bytes=vmem_limit_bytes)
    kv_lens, page_indices, cu_q_lens, num_seqs = (a.astype(jnp.int32) for a in (kv_lens, page_indices, cu_q_lens,
                                                                             num_seqs))
    return _registry.call("ragged_paged_attention", _registry.current_platform(), q, kv_pages, kv_lens,
                          page_indices, cu_q_lens, num_seqs, **kw, num_kv_pages_per_block=num_kv_pages_per_block,
                          num_queries_per_block=num_queries_per_block, vmem_limit_bytes=vmem_limit_bytes)
