"""Ragged paged attention with separate K and V page tables: upstream's first
version (`ragged_paged_attention_kernel`), on JAX arrays.

JAX ships no kernel for this layout, so `ragged_paged_attention` runs the exact
XLA reference on every platform (the same mathematics as the second version,
`ragged_paged_attention_v2`, whose reference it shares). It keeps upstream's
calling convention: it is wrapped in `checkify`, returns `(err, output)`, and
`err.throw()` raises when a sequence has more queries than cached tokens.
`make_sequence_metadata` computes the kernel's tile metadata (which sequence
and which query tile each grid step works on).
"""
import functools

import jax
from jax.experimental import checkify
import jax.numpy as jnp

from torch_xla.experimental.pallas_kernels import ragged_paged_attention_v2 as _v2

DEFAULT_MASK_VALUE = _v2.DEFAULT_MASK_VALUE
MIN_BLOCK_SIZE = 128
# the kernel loads blocks of page indices whose last dimension is a lane multiple
_LANES = 128


def _calculate_num_tiles(x: int, tx: int) -> int:
    tiles, rem = divmod(x, tx)
    if rem:
        raise ValueError(f"{x} must be divisible by x-dimension tile size ({tx}).")
    return tiles


def make_sequence_metadata(*, cu_q_lens, m: int, tm: int, start_sequence, num_sequences: int):
    """Grid metadata for m query rows cut into tiles of tm rows.

    A tile is visited once by every sequence with rows in it, in order. ->
    ((seq_ids, physical_q_tile_ids), num_logical_q_tiles): grid step i works
    on sequence seq_ids[i] and query tile physical_q_tile_ids[i] (both of
    length m // tm + num_sequences - 1, padded past the end), and
    num_logical_q_tiles is how many steps the sequences start_sequence ..
    start_sequence + num_sequences - 1 need."""
    tiles_m = _calculate_num_tiles(m, tm)
    length = tiles_m + num_sequences - 1
    starts = cu_q_lens[:num_sequences].astype(jnp.int32)
    ends = cu_q_lens[1:num_sequences + 1].astype(jnp.int32)
    # tiles touched by each sequence: from the tile of its first row to the
    # tile of its last (an empty sequence touches none)
    first_tile = starts // tm
    end_tile = (ends + tm - 1) // tm
    tiles_per_seq = jnp.maximum(end_tile - first_tile, 0)
    seq_ids = jnp.repeat(jnp.arange(num_sequences, dtype=jnp.int32), tiles_per_seq,
                         total_repeat_length=length)
    # tile j is visited by the sequence owning its first row, plus every
    # sequence that starts inside it past its first row
    # (every entry of cu_q_lens but the last counts here, as in the kernel)
    offsets = cu_q_lens[:-1].astype(jnp.int32)
    starts_inside = jnp.where(offsets % tm == 0, tiles_m, offsets // tm)
    visits = 1 + jnp.zeros(tiles_m, jnp.int32).at[starts_inside].add(1, mode="drop")
    tile_ids = jnp.repeat(jnp.arange(tiles_m, dtype=jnp.int32), visits, total_repeat_length=length)
    # a shard's sequences first
    skip = jnp.sum(seq_ids < start_sequence)
    seq_ids = jnp.roll(seq_ids, -skip)
    tile_ids = jnp.roll(tile_ids, -skip)
    ids = jnp.arange(num_sequences, dtype=jnp.int32)
    mine = (ids >= start_sequence) & (ids <= start_sequence + num_sequences - 1)
    num_tiles = jnp.sum(jnp.where(mine, tiles_per_seq, 0))
    return (seq_ids, tile_ids), num_tiles


def check_kernel_input(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, num_kv_pages_per_block):
    """Upstream's input checks (q here is [num_q_heads, num_tokens, head_dim],
    the kernel's layout): ValueError for shapes, dtypes and block sizes, and a
    checkify check that no sequence has more queries than cached tokens.
    Index arrays may be any integer type (int64 is what JAX makes once
    torch_xla has enabled x64); they are used as int32."""
    num_q_heads, num_tokens, head_dim = q.shape
    num_kv_heads = k_pages.shape[0]
    pages_per_sequence = page_indices.shape[1]
    check_kv_pages(head_dim, k_pages, v_pages)
    for name, a, want in (("kv_lens", kv_lens, num_tokens), ("page_indices", page_indices, num_tokens),
                          ("cu_q_lens", cu_q_lens, num_tokens + 1)):
        if a.shape[0] != want:
            raise ValueError(f"{name}.shape[0] must be {want} (from num_tokens). Got {a.shape[0]}")
    # one check for all sequences (it reports the first offending one)
    q_lens = cu_q_lens[1:num_seqs + 1] - cu_q_lens[:num_seqs]
    bad = jnp.argmax(q_lens > kv_lens[:num_seqs])
    checkify.check(jnp.all(q_lens <= kv_lens[:num_seqs]),
                   "cur_q_len must be less or equal to cur_kv_len. Got {} and {}", q_lens[bad], kv_lens[bad])
    if num_seqs > num_tokens:
        raise ValueError(f"num_seqs must be less or equal to num_tokens. Got {num_seqs} and {num_tokens}")
    if not all(jnp.issubdtype(a.dtype, jnp.integer) for a in (kv_lens, page_indices, cu_q_lens)):
        raise ValueError(f"The dtype of `lengths` must be int32. Got {kv_lens.dtype=}, {page_indices.dtype=}, "
                         f"{cu_q_lens.dtype=}")
    if num_kv_pages_per_block > pages_per_sequence:
        raise ValueError(f"{num_kv_pages_per_block=} should be smaller or equal to {pages_per_sequence=}")
    if num_kv_pages_per_block % _LANES:
        raise ValueError(f"{num_kv_pages_per_block=} should be a multiple of {_LANES}")
    if pages_per_sequence % num_kv_pages_per_block:
        raise ValueError(f"pages_per_sequence must be divisible by num_kv_pages_per_block. Got "
                         f"{pages_per_sequence=} and {num_kv_pages_per_block=}.")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"Number of Q heads must be divisible by number of KV heads. Got {num_q_heads} and "
                         f"{num_kv_heads}.")


def check_kv_pages(head_dim, k_pages, v_pages):
    """Upstream's checks shared by the paged kernels: K and V pages of one shape,
    whose head_dim (the last dimension) is Q's."""
    if k_pages.shape != v_pages.shape:
        raise ValueError(f"k_pages and v_pages must have the same shape. Got {k_pages.shape} and {v_pages.shape}")
    if k_pages.shape[-1] != head_dim:
        raise ValueError(f"head_dim of Q must be the same as that of K/V. Got {head_dim} and {k_pages.shape[-1]}.")


def _dequantized(pages, dtype):
    """pages, or the values of a paged_attention QuantizedTensor (int8 weight
    times its scales)."""
    if type(pages).__name__ == "QuantizedTensor":
        from jax.experimental.pallas.ops.tpu.paged_attention import quantization_utils
        return quantization_utils.unquantize_from_int8(pages, dtype)
    return pages


@checkify.checkify
@functools.partial(jax.jit, static_argnames=["num_kv_pages_per_block", "num_queries_per_block", "mask_value",
                                             "num_seqs", "sm_scale"])
def ragged_paged_attention(
    q,              # [num_tokens, num_q_heads, head_dim]
    k_pages,        # [num_kv_heads, total_num_pages, page_size, head_dim]
    v_pages,        # [num_kv_heads, total_num_pages, page_size, head_dim]
    kv_lens,        # i32[num_tokens]: the first num_seqs entries are used
    page_indices,   # i32[num_tokens, pages_per_sequence]
    cu_q_lens,      # i32[num_tokens + 1]
    num_seqs,       # int
    *,
    mask_value: float = DEFAULT_MASK_VALUE,
    num_kv_pages_per_block: int = 128,
    num_queries_per_block: int = 128,
    sm_scale: float = 1.0,
):
    """Causal attention for a flat batch of tokens of `num_seqs` sequences:
    sequence s owns rows cu_q_lens[s]:cu_q_lens[s+1] of q and kv_lens[s]
    cached tokens in pages page_indices[s]. -> (checkify error, output
    [num_tokens, num_q_heads, head_dim]); rows past the last sequence's tokens
    are zero. K/V pages may be paged_attention QuantizedTensors. The block
    sizes are checked as the TPU kernel needs them; the result does not depend
    on them."""
    num_tokens, num_q_heads, head_dim = q.shape
    check_kernel_input(jnp.swapaxes(q, 0, 1), k_pages if not hasattr(k_pages, "weight") else k_pages.weight,
                       v_pages if not hasattr(v_pages, "weight") else v_pages.weight, kv_lens, page_indices,
                       cu_q_lens, num_seqs, num_kv_pages_per_block)
    k_pages = _dequantized(k_pages, q.dtype)
    v_pages = _dequantized(v_pages, q.dtype)
    num_kv_heads, _, page_size, _ = k_pages.shape
    pages_per_sequence = page_indices.shape[1]

    def gather(s):
        def one(pages):
            g = pages[:, page_indices[s]]                    # [KVH, pages_per_sequence, page_size, D]
            return jnp.swapaxes(g.reshape(num_kv_heads, pages_per_sequence * page_size, head_dim), 0, 1)
        return one(k_pages), one(v_pages)

    return _v2.ragged_attention(q, gather, kv_lens, cu_q_lens, num_seqs, num_seqs, sm_scale=sm_scale,
                                mask_value=mask_value, kv_len_bound=pages_per_sequence * page_size)
