"""Paged attention for several new tokens per sequence (prefill, speculative
decoding): upstream's `multi_queries_paged_attention_kernel`, on JAX arrays.

JAX ships no kernel for it, so `paged_attention` runs the exact XLA reference
on every platform; torch_xla.experimental.custom_kernel's
multi_queries_paged_attention runs the same reference.
"""
import functools

import jax
import jax.numpy as jnp

from torch_xla.experimental.pallas_kernels import _registry
from torch_xla.experimental.pallas_kernels.ragged_paged_attention_kernel import _dequantized, check_kv_pages
from torch_xla.experimental.pallas_kernels.ragged_paged_attention_v2 import soft_cap_logits

DEFAULT_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.dtype("float32")).max)
MIN_BLOCK_SIZE = 128
_HIGHEST = jax.lax.Precision.HIGHEST


def gather_pages(pages, page_indices):
    """pages [kv_heads, total_pages, page_size, D] at page_indices [B, n]
    -> [B, kv_heads, n * page_size, D]."""
    g = pages[:, page_indices]                              # [H, B, n, page_size, D]
    h, b, n, ps, d = g.shape
    return jnp.swapaxes(g.reshape(h, b, n * ps, d), 0, 1)


@_registry.register("multi_queries_paged_attention")
def _reference(q, k_pages, v_pages, lengths, page_indices, effective_q_lens, *, soft_cap=None,
               mask_value=DEFAULT_MASK_VALUE):
    """q [B, Lq, H, D]: query i of sequence b sits at position
    lengths[b] - effective_q_lens[b] + i and sees the cached positions up to
    its own (of the first lengths[b])."""
    b, lq, h, d = q.shape
    kvh = k_pages.shape[0]
    k = gather_pages(k_pages, page_indices)                 # [B, KVH, L, D]
    v = gather_pages(v_pages, page_indices)
    qg = q.reshape(b, lq, kvh, h // kvh, d)
    logits = jnp.einsum("bqgrd,bgld->bgrql", qg, k, precision=_HIGHEST, preferred_element_type=jnp.float32)
    logits = soft_cap_logits(logits, soft_cap)
    j = jnp.arange(k.shape[2])
    last = (lengths - effective_q_lens)[:, None] + jnp.arange(lq)[None, :]      # [B, Lq]
    allowed = (j[None, None, :] <= last[:, :, None]) & (j[None, None, :] < lengths[:, None, None])
    logits = jnp.where(allowed[:, None, None], logits, mask_value)
    w = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bgrql,bgld->bqgrd", w, v.astype(jnp.float32), precision=_HIGHEST)
    return out.reshape(b, lq, h, d).astype(q.dtype)


@functools.partial(jax.jit, static_argnames=["num_kv_pages_per_compute_block", "num_queries_per_compute_block",
                                             "mask_value", "attn_logits_soft_cap"])
def paged_attention(
    q,                  # [batch_size, query_len, num_q_heads, head_dim]
    k_pages,            # [num_kv_heads, total_num_pages, page_size, head_dim] (or a QuantizedTensor)
    v_pages,            # [num_kv_heads, total_num_pages, page_size, head_dim] (or a QuantizedTensor)
    lengths,            # i32[batch_size]: kv length of each sequence
    page_indices,       # i32[batch_size, pages_per_sequence]
    effective_q_lens,   # i32[batch_size]: real query tokens of each sequence
    *,
    mask_value: float = DEFAULT_MASK_VALUE,
    num_kv_pages_per_compute_block: int,
    num_queries_per_compute_block: int = 4,
    attn_logits_soft_cap: float | None = None,
):
    """Grouped-query paged attention: query i of sequence b attends causally to
    the cached tokens [0, lengths[b] - effective_q_lens[b] + i] read from pages
    page_indices[b]. No scale is applied; the soft cap replaces a logit x with
    cap * tanh(x / cap). -> [batch_size, query_len, num_q_heads, head_dim].
    The block sizes are checked as upstream's TPU kernel needs them; the result
    does not depend on them."""
    k_pages = _dequantized(k_pages, q.dtype)
    v_pages = _dequantized(v_pages, q.dtype)
    b, lq, h, d = q.shape
    kvh, _, page_size, _ = k_pages.shape
    pages_per_sequence = page_indices.shape[1]
    check_kv_pages(d, k_pages, v_pages)
    if tuple(lengths.shape) != (b,) or lengths.shape != effective_q_lens.shape:
        raise ValueError(f"`lengths` and `effective_q_lens` must be [batch_size] ({b}), got "
                         f"{tuple(lengths.shape)} and {tuple(effective_q_lens.shape)}")
    if page_indices.shape[0] != b:
        raise ValueError("`page_indices` and `q` must have the same batch size")
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise ValueError(f"The dtype of `lengths` must be int32. Got {lengths.dtype}")
    if num_queries_per_compute_block > lq:
        raise ValueError(f"{num_queries_per_compute_block=} should be smaller or equal to query_len={lq}")
    if num_kv_pages_per_compute_block > pages_per_sequence:
        raise ValueError(f"{num_kv_pages_per_compute_block=} should be smaller or equal to {pages_per_sequence=}")
    if pages_per_sequence % num_kv_pages_per_compute_block:
        raise ValueError(f"pages_per_sequence ({pages_per_sequence}) must be divisible by "
                         f"num_kv_pages_per_compute_block ({num_kv_pages_per_compute_block}).")
    if h % kvh:
        raise ValueError(f"Number of Q heads must be divisible by number of KV heads. Got {h} and {kvh}.")
    # int64 index arrays (JAX's default once torch_xla has enabled x64) are used as int32
    lengths, page_indices, effective_q_lens = (a.astype(jnp.int32) for a in (lengths, page_indices, effective_q_lens))
    return _registry.call("multi_queries_paged_attention", _registry.current_platform(), q, k_pages, v_pages,
                          lengths, page_indices, effective_q_lens, soft_cap=attn_logits_soft_cap,
                          mask_value=mask_value)
