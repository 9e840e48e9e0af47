"""torch_xla.experimental.custom_kernel: attention, grouped-matmul and quantized
kernels, and a way to run your own Pallas kernel on XLA tensors.

Every kernel enters the lazy graph as ONE node (through `call_jax`), so it
traces, compiles and differentiates like any other op. Which implementation
the node runs is decided when the graph is lowered, from the platform it
compiles for:

  * TPU: the Pallas TPU kernels shipped with JAX (`jax.experimental.pallas.ops.tpu`:
    flash attention, paged attention, ragged paged attention, megablox gmm/tgmm)
    when the shapes fit their block constraints;
  * CUDA: cuDNN's fused attention (`jax.nn.dot_product_attention(implementation=
    'cudnn')`) for flash_attention when dtype and shapes allow;
  * everywhere else, and whenever a kernel does not fit: an exact JAX reference
    (the same mathematics, masking and layouts), which is what runs on CPU.

Each kernel has one table, platform -> builder (`pallas_kernels._registry`):
builders are registered with `@_registry.register(name, platform=...)`, the
default entry being the reference, and `_kernel(name)` is the function a node
runs: it looks up the platform being lowered for (`api.lowering_platform()`)
and falls back to the reference when the builder returns None (the call does
not fit it) or cannot be used. The references of the kernels upstream ships in
`torch_xla.experimental.pallas_kernels` live there, beside their JAX-level
functions. The Pallas TPU modules are imported only while lowering for a TPU.
See docs/kernels.md for the user-facing description.
"""
import functools
import math
from typing import Callable, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
import torch

from torch_xla._internal.jax_workarounds import jax_import_guard, requires_jax  # noqa: F401  (upstream re-exports them)
from torch_xla.engine import api as _api
from torch_xla.experimental.pallas_kernels import _registry
from torch_xla.experimental.pallas_kernels import multi_queries_paged_attention_kernel as _mq_kernels
from torch_xla.experimental.pallas_kernels import quantized_matmul_kernel as _qmm_kernels
from torch_xla.experimental.pallas_kernels import ragged_paged_attention_v2 as _ragged_kernels

__all__ = [
    "flash_attention", "FlashAttention", "paged_attention", "multi_queries_paged_attention",
    "ragged_paged_attention", "gmm", "tgmm", "gmm_backward", "GMM", "quantized_matmul_int8",
    "trace_pallas", "make_kernel_from_pallas", "convert_torch_dtype_to_jax",
    "to_jax_shape_dtype_struct", "repeat_with_fixed_output_size", "jax_import_guard",
    "DEFAULT_MASK_VALUE",
]

# a finite "minus infinity": a fully masked row stays finite (uniform), as in the TPU kernels
DEFAULT_MASK_VALUE = -0.7 * float(torch.finfo(torch.float32).max)
_GPU_PLATFORMS = _registry.GPU_PLATFORMS
_HIGHEST = jax.lax.Precision.HIGHEST


# ---------------------------------------------------------------------------
# dtypes

_TORCH_TO_JAX_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
    torch.float8_e5m2: "float8_e5m2", torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e4m3fnuz: "float8_e4m3fnuz",
}


def convert_torch_dtype_to_jax(dtype: torch.dtype) -> "jnp.dtype":
    """The JAX dtype of a torch dtype (ValueError for one JAX lacks)."""
    name = _TORCH_TO_JAX_NAMES.get(dtype)
    if name is None:
        raise ValueError(f"Unsupported dtype: {dtype}")
    return jnp.dtype(name)


def to_jax_shape_dtype_struct(tensor: torch.Tensor) -> "jax.ShapeDtypeStruct":
    """A storage-free JAX description (shape, dtype) of a torch tensor."""
    return jax.ShapeDtypeStruct(tuple(tensor.shape), convert_torch_dtype_to_jax(tensor.dtype))


def _torch_dtype(jdt):
    jdt = jnp.dtype(jdt)
    for t, name in _TORCH_TO_JAX_NAMES.items():
        if jnp.dtype(name) == jdt:
            return t
    raise ValueError(f"no torch dtype for {jdt}")


# ---------------------------------------------------------------------------
# running a JAX function on torch tensors

def _is_fake(t):
    return t.device.type == "meta" or type(t).__name__ in ("FakeTensor", "FunctionalTensor")


def _run(fn, args, kwargs=None, name=None):
    """`fn(*args, **kwargs)` (a JAX function) on the torch tensors among the
    arguments: one graph node when they are XLA tensors (CPU tensors beside
    them are moved to the device), output shapes only for meta/fake tensors,
    and eagerly on the host for plain CPU tensors (no autograd there)."""
    from torch_xla.core import xla_builder as xb
    kwargs = dict(kwargs or {})
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    xla = [x for x in tensors if _api.is_xla_tensor(x)]
    if xla and len(xla) == len(tensors):
        return xb.call_jax(fn, args, kwargs, name=name)
    if xla and not any(_is_fake(t) for t in tensors):
        dev = xla[0].device
        leaves = [x.to(dev) if isinstance(x, torch.Tensor) and not _api.is_xla_tensor(x) else x for x in leaves]
        a, k = jax.tree_util.tree_unflatten(tree, leaves)
        return xb.call_jax(fn, a, k, name=name)
    flat = xb._array_fn(fn, leaves, tree, [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)])
    if any(_is_fake(t) for t in tensors):
        out = jax.eval_shape(flat, *[to_jax_shape_dtype_struct(t) for t in tensors])
        dev = tensors[0].device
        return jax.tree_util.tree_map(
            lambda s: torch.empty(s.shape, dtype=_torch_dtype(s.dtype), device=dev), out)
    out = jax.jit(flat)(*[jnp.asarray(_api.torch_to_numpy(t.detach().cpu())) for t in tensors])
    dev = tensors[0].device if tensors else "cpu"

    def back(a):
        host = np.asarray(a)
        if host.dtype == jnp.bfloat16:
            return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16).to(dev)
        return torch.from_numpy(host.copy()).to(dev)

    return jax.tree_util.tree_map(back, out)


@functools.lru_cache(maxsize=None)
def _kernel(name, platform_kernels=True):
    """The JAX function a node of kernel `name` runs: the builder its table
    has for the platform being lowered for (None while only shapes are
    evaluated: the reference), else the reference. Without
    `platform_kernels`, always the reference. One function object per kernel,
    so call_jax's compilation cache keeps it."""
    def run(*args, **kwargs):
        platform = _api.lowering_platform() if platform_kernels else None
        return _registry.call(name, platform, *args, **kwargs)
    run.__name__ = run.__qualname__ = name
    return run


def _block(n, cap, unit=128):
    """The largest multiple of `unit` up to `cap` dividing n; None when there is none."""
    for b in range(cap - cap % unit, 0, -unit):
        if n % b == 0:
            return b
    return None


# ---------------------------------------------------------------------------
# flash attention

@_registry.register("flash_attention")
def _attention_reference(q, k, v, ab, q_seg, kv_seg, causal, sm_scale, mask_value=DEFAULT_MASK_VALUE):
    """softmax((q k^T + ab) * sm_scale, masked) v, accumulated in float32.
    q: [..., Lq, D], k/v: [..., Lk, D]; segment ids [B, L] (4-d q)."""
    f32 = jnp.float32
    logits = jnp.einsum("...qd,...kd->...qk", q, k, precision=_HIGHEST, preferred_element_type=f32)
    if ab is not None:
        logits = logits + ab.astype(f32)
    if sm_scale != 1.0:
        logits = logits * sm_scale
    allowed = None
    if q_seg is not None:
        allowed = (q_seg[:, :, None] == kv_seg[:, None, :])[:, None]   # [B, 1, Lq, Lk]
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        tri = jnp.arange(lk)[None, :] <= jnp.arange(lq)[:, None]
        allowed = tri if allowed is None else jnp.logical_and(allowed, tri)
    if allowed is not None:
        logits = logits + jnp.where(allowed, 0.0, mask_value).astype(f32)
    w = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("...qk,...kd->...qd", w, v.astype(f32), precision=_HIGHEST)
    return out.astype(q.dtype)


@_registry.register("flash_attention", platform="tpu")
def _flash_tpu(q, k, v, ab, q_seg, kv_seg, causal, sm_scale):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    if q.ndim != 4:
        return None
    bq, bk = _block(q.shape[2], 512), _block(k.shape[2], 512)
    if bq is None or bk is None:
        return None
    sizes = fa.BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1,
                          block_q_major_dkv=bq, block_k_major_dkv=bk, block_k_dkv=bk, block_q_dkv=bq,
                          block_k_major_dq=bk, block_k_dq=bk, block_q_dq=bq)
    seg = None if q_seg is None else fa.SegmentIds(q=q_seg.astype(jnp.int32), kv=kv_seg.astype(jnp.int32))
    return fa.flash_attention(q, k, v, ab=ab, segment_ids=seg, causal=causal, sm_scale=sm_scale,
                              block_sizes=sizes)


@_registry.register("flash_attention", platform="gpu")
def _flash_cudnn(q, k, v, ab, q_seg, kv_seg, causal, sm_scale):
    """cuDNN's fused attention where it applies: 4-d half-precision inputs, a
    head size cuDNN takes, no bias or segment ids, square when causal."""
    if (q.ndim != 4 or ab is not None or q_seg is not None or q.dtype not in (jnp.float16, jnp.bfloat16)
            or q.shape[-1] > 128 or q.shape[-1] % 8 or (causal and q.shape[2] != k.shape[2])
            or not hasattr(jax.nn, "dot_product_attention")):
        return None
    t = functools.partial(jnp.swapaxes, axis1=1, axis2=2)   # [B, H, L, D] <-> [B, L, H, D]
    try:
        out = jax.nn.dot_product_attention(t(q), t(k), t(v), scale=sm_scale, is_causal=causal,
                                           implementation="cudnn")
    except (NotImplementedError, ValueError, TypeError, RuntimeError):
        return None
    return t(out)


def _check_attention(q, k, v, q_segment_ids, kv_segment_ids, ab):
    if (q_segment_ids is None) != (kv_segment_ids is None):
        raise ValueError("Both q_segment_ids and kv_segment_ids should be provided.")
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"flash_attention: q, k, v must have the same rank (>= 3), got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"flash_attention: incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if q_segment_ids is not None:
        if q.dim() != 4:
            raise ValueError("flash_attention: segment ids need 4-d q, k, v [batch, heads, seq, dim]")
        if tuple(q_segment_ids.shape) != (q.shape[0], q.shape[2]) or \
                tuple(kv_segment_ids.shape) != (k.shape[0], k.shape[2]):
            raise ValueError(f"flash_attention: segment ids must be [batch, q_seq] and [batch, kv_seq], got "
                             f"{tuple(q_segment_ids.shape)} and {tuple(kv_segment_ids.shape)}")
    if ab is not None and tuple(ab.shape) != tuple(q.shape[:-1]) + (k.shape[-2],):
        raise ValueError(f"flash_attention: ab must be {tuple(q.shape[:-1]) + (k.shape[-2],)}, "
                         f"got {tuple(ab.shape)}")


def _flash_call(q, k, v, causal, q_seg, kv_seg, sm_scale, ab):
    return _run(_kernel("flash_attention"), (q, k, v, ab, q_seg, kv_seg),
                {"causal": bool(causal), "sm_scale": float(sm_scale)}, name="flash_attention")


def _mesh_of(mesh):
    import torch_xla.distributed.spmd as xs
    if mesh is None or isinstance(mesh, str):
        # upstream's custom op passes the mesh as a string; the global mesh is the one meant
        mesh = xs.get_global_mesh()
        if mesh is None:
            raise ValueError("flash_attention: partition_spec given but no mesh (pass mesh= or "
                             "xs.set_global_mesh)")
    return mesh


def _flash_vjp(q, k, v, ab, q_seg, kv_seg, grad, *, causal, sm_scale):
    def f(q, k, v, ab):
        return _kernel("flash_attention")(q, k, v, ab, q_seg, kv_seg, causal=causal, sm_scale=sm_scale)
    _, pull = jax.vjp(f, q, k, v, ab)
    return pull(grad.astype(q.dtype))


class _ShardedFlash(torch.autograd.Function):
    """The kernel per shard inside a manual-sharding region (shard_map), in the
    forward and again in the backward (the region's edges carry no autograd)."""

    @staticmethod
    def forward(ctx, q, k, v, ab, q_seg, kv_seg, causal, sm_scale, spec, mesh):
        import torch_xla.distributed.spmd as xs
        ctx.save_for_backward(q, k, v, ab, q_seg, kv_seg)
        ctx.args = (causal, sm_scale, spec, mesh)
        seg_spec = (spec[0], spec[-2])

        def local(t, s):
            return None if t is None else xs.enable_manual_sharding(t, s, mesh=mesh).global_tensor

        out = _flash_call(local(q, spec), local(k, spec), local(v, spec), causal, local(q_seg, seg_spec),
                          local(kv_seg, seg_spec), sm_scale, local(ab, spec))
        return xs.disable_manual_sharding(out, spec, tuple(q.shape), mesh=mesh).global_tensor

    @staticmethod
    def backward(ctx, grad):
        import torch_xla.distributed.spmd as xs
        q, k, v, ab, q_seg, kv_seg = ctx.saved_tensors
        causal, sm_scale, spec, mesh = ctx.args
        seg_spec = (spec[0], spec[-2])

        def local(t, s):
            return None if t is None else xs.enable_manual_sharding(t, s, mesh=mesh).global_tensor

        grads = _run(_flash_vjp, (local(q, spec), local(k, spec), local(v, spec), local(ab, spec),
                                  local(q_seg, seg_spec), local(kv_seg, seg_spec), local(grad.contiguous(), spec)),
                     {"causal": causal, "sm_scale": sm_scale}, name="flash_attention_vjp")
        full = [None if g is None else
                xs.disable_manual_sharding(g, spec, tuple(t.shape), mesh=mesh).global_tensor
                for g, t in zip(grads, (q, k, v, ab))]
        return (*full, None, None, None, None, None, None)


def _flash_sharded(q, k, v, causal, q_seg, kv_seg, sm_scale, ab, partition_spec, mesh):
    """q, k, v (and ab) laid out by `partition_spec` over `mesh`, segment ids by
    its batch and sequence entries. With the sequence and head-size axes whole,
    the kernel runs per shard (a manual region, as the TPU kernels need); when
    they are split, a per-shard causal or segment mask would be wrong, so the
    partitioner splits the whole-sequence computation instead."""
    import torch_xla.distributed.spmd as xs
    mesh = _mesh_of(mesh)
    spec = tuple(partition_spec)
    if len(spec) != q.dim():
        raise ValueError(f"flash_attention: partition_spec {spec} does not match q's rank {q.dim()}")
    if q.dim() != 4 or spec[-2] is not None or spec[-1] is not None:
        q, k, v = (xs.mark_sharding(t, mesh, spec).global_tensor for t in (q, k, v))
        return _flash_call(q, k, v, causal, q_seg, kv_seg, sm_scale, ab)
    return _ShardedFlash.apply(q, k, v, ab, q_seg, kv_seg, bool(causal), float(sm_scale), spec, mesh)


def flash_attention(
    q,   # [batch, heads, q_seq, head_dim] (more leading batch dims are allowed)
    k,   # [batch, heads, kv_seq, head_dim]
    v,   # [batch, heads, kv_seq, head_dim]
    causal=False,
    q_segment_ids=None,    # [batch, q_seq]
    kv_segment_ids=None,   # [batch, kv_seq]
    sm_scale=1.0,
    *,
    ab=None,               # [batch, heads, q_seq, kv_seq], added to the logits before the scale
    partition_spec=None,
    mesh=None,
):
    """Attention `softmax((q @ k^T + ab) * sm_scale) @ v` with optional causal
    and segment masks (a query attends to keys of its own segment only), as
    one differentiable graph node. Note `sm_scale` defaults to 1 (no 1/sqrt(d)).
    With `partition_spec` (and `mesh`, default the global mesh) under SPMD the
    kernel runs per shard."""
    _check_attention(q, k, v, q_segment_ids, kv_segment_ids, ab)
    if q_segment_ids is not None:
        q_segment_ids = q_segment_ids.to(torch.int32)
        kv_segment_ids = kv_segment_ids.to(torch.int32)
    if partition_spec is not None:
        return _flash_sharded(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale, ab, partition_spec, mesh)
    return _flash_call(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale, ab)


class FlashAttention:
    """Upstream's autograd wrapper, kept for its constants and `apply`: here the
    node is differentiable by itself, so `apply` is `flash_attention` with
    upstream's positional order (q, k, v, causal, q_segment_ids,
    kv_segment_ids, sm_scale, ab, partition_spec, mesh)."""
    MIN_BLOCK_SIZE = 128
    DEFAULT_MASK_VALUE = DEFAULT_MASK_VALUE
    NUM_LANES = 128
    NUM_SUBLANES = 8

    @staticmethod
    def apply(q, k, v, causal=False, q_segment_ids=None, kv_segment_ids=None, sm_scale=1.0, ab=None,
              partition_spec=None, mesh=None):
        return flash_attention(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale, ab=ab,
                               partition_spec=partition_spec, mesh=mesh)


# ---------------------------------------------------------------------------
# paged attention (decode: one query per sequence)

_gather_pages = _mq_kernels.gather_pages
_soft_cap = _ragged_kernels.soft_cap_logits


@_registry.register("paged_attention")
def _paged_reference(q, k_pages, v_pages, lengths, page_indices, *, pages_per_compute_block, megacore_mode,
                     soft_cap, mask_value=DEFAULT_MASK_VALUE):
    b, h, d = q.shape
    kvh = k_pages.shape[0]
    k = _gather_pages(k_pages, page_indices)
    v = _gather_pages(v_pages, page_indices)
    qg = q.reshape(b, kvh, h // kvh, d)                    # query head i uses kv head i // (h // kvh)
    logits = jnp.einsum("bgrd,bgld->bgrl", qg, k, precision=_HIGHEST, preferred_element_type=jnp.float32)
    logits = _soft_cap(logits, soft_cap)
    valid = jnp.arange(k.shape[2])[None, :] < lengths[:, None]
    logits = jnp.where(valid[:, None, None, :], logits, mask_value)
    w = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bgrl,bgld->bgrd", w, v.astype(jnp.float32), precision=_HIGHEST)
    return out.reshape(b, h, d).astype(q.dtype)


@_registry.register("paged_attention", platform="tpu")
def _paged_tpu(q, k_pages, v_pages, lengths, page_indices, *, pages_per_compute_block, megacore_mode, soft_cap):
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as pa
    if page_indices.shape[1] % pages_per_compute_block:
        return None
    return pa(q, k_pages, v_pages, lengths, page_indices, pages_per_compute_block=pages_per_compute_block,
              megacore_mode=megacore_mode, attn_logits_soft_cap=soft_cap)


def paged_attention(q,                # [batch, heads, head_dim]
                    k_pages,          # [kv_heads, total_pages, page_size, head_dim]
                    v_pages,          # [kv_heads, total_pages, page_size, head_dim]
                    lengths,          # i32[batch]: tokens in each sequence's cache
                    page_indices,     # i32[batch, pages_per_sequence]
                    pages_per_compute_block,
                    megacore_mode: str = None,
                    attn_logits_soft_cap: float = None):
    """Decode attention over a paged KV cache: each sequence's query attends to
    the first `lengths[b]` cached tokens, gathered from `page_indices[b]`.
    No scaling is applied (scale q beforehand); heads may be grouped
    (heads a multiple of kv_heads). -> [batch, heads, head_dim]."""
    if megacore_mode not in ("kv_head", "batch", None):
        raise ValueError("megacore_mode must be one of ['kv_head', 'batch', None].")
    if q.dim() != 3 or k_pages.dim() != 4 or q.shape[1] % k_pages.shape[0]:
        raise ValueError(f"paged_attention: q [batch, heads, dim] with heads a multiple of k_pages' "
                         f"kv_heads, got q {tuple(q.shape)}, k_pages {tuple(k_pages.shape)}")
    return _run(_kernel("paged_attention"), (q, k_pages, v_pages, lengths, page_indices),
                {"pages_per_compute_block": int(pages_per_compute_block), "megacore_mode": megacore_mode,
                 "soft_cap": None if attn_logits_soft_cap is None else float(attn_logits_soft_cap)},
                name="paged_attention")


def multi_queries_paged_attention(
    q,                  # [batch, query_len, heads, head_dim]
    k_pages,            # [kv_heads, total_pages, page_size, head_dim]
    v_pages,            # [kv_heads, total_pages, page_size, head_dim]
    lengths,            # i32[batch]: kv length of each sequence
    page_indices,       # i32[batch, pages_per_sequence]
    effective_q_lens,   # i32[batch]: real query tokens of each sequence
    num_kv_pages_per_compute_block,
    num_queries_per_compute_block,
    use_kernel=True,
    attn_logits_soft_cap: float | None = None,
):
    """Paged attention for several new tokens per sequence (prefill/speculative
    decode): query i of sequence b attends causally to cached tokens
    [0, lengths[b] - effective_q_lens[b] + i]. -> [batch, query_len, heads, head_dim].
    Upstream's kernel for this is its own (not in JAX): the XLA reference of
    pallas_kernels.multi_queries_paged_attention_kernel runs on every
    platform; the block sizes are accepted for compatibility."""
    if q.dim() != 4:
        raise ValueError("q should have 4 dimensions.")
    if q.shape[2] % k_pages.shape[0]:
        raise ValueError(f"multi_queries_paged_attention: heads {q.shape[2]} not a multiple of kv heads "
                         f"{k_pages.shape[0]}")
    return _run(_kernel("multi_queries_paged_attention"), (q, k_pages, v_pages, lengths, page_indices,
                                                           effective_q_lens),
                {"soft_cap": None if attn_logits_soft_cap is None else float(attn_logits_soft_cap)},
                name="multi_queries_paged_attention")


# ---------------------------------------------------------------------------
# ragged paged attention (mixed prefill and decode in one flat token batch)

def ragged_paged_attention(
    q,              # [max_num_batched_tokens, q_heads, head_dim]
    kv_pages,       # [total_pages, page_size, 2 * kv_heads, head_dim]: k and v heads interleaved
    kv_lens,        # i32[max_num_seqs]
    page_indices,   # i32[max_num_seqs, pages_per_seq]
    cu_q_lens,      # i32[max_num_seqs + 1]: each sequence's first token in q
    num_seqs,       # i32[1]: sequences in use
    *,
    sm_scale=1.0,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    mask_value=None,
    k_scale: float | None = None,
    v_scale: float | None = None,
    use_kernel=True,
    num_kv_pages_per_block=None,
    num_queries_per_block=None,
    vmem_limit_bytes=None,
):
    """Attention for a flat batch of tokens from several sequences (ragged:
    sequence s owns q rows cu_q_lens[s]:cu_q_lens[s+1]); each token attends
    causally to its sequence's cached tokens (its position is
    kv_lens[s] - q_len + offset), within `sliding_window` when given.
    -> [max_num_batched_tokens, q_heads, head_dim]; rows past the last
    sequence's tokens are zero. Inputs are not checked on the host."""
    if kv_pages.dim() != 4 or kv_pages.shape[2] % 2 or q.shape[1] % (kv_pages.shape[2] // 2):
        raise ValueError(f"ragged_paged_attention: kv_pages [pages, page_size, 2 * kv_heads, dim] with "
                         f"q heads a multiple of kv heads, got q {tuple(q.shape)}, kv_pages {tuple(kv_pages.shape)}")
    kw = {"sm_scale": float(sm_scale),
          "sliding_window": None if sliding_window is None else int(sliding_window),
          "soft_cap": None if soft_cap is None else float(soft_cap),
          "mask_value": DEFAULT_MASK_VALUE if mask_value is None else float(mask_value),
          "k_scale": None if k_scale is None else float(k_scale),
          "v_scale": None if v_scale is None else float(v_scale)}
    tuning = (("num_kv_pages_per_block", num_kv_pages_per_block), ("num_queries_per_block", num_queries_per_block),
              ("vmem_limit_bytes", vmem_limit_bytes if vmem_limit_bytes is not None else 120 * 1024 * 1024))
    # the reference and JAX's TPU kernel are registered by pallas_kernels.ragged_paged_attention_v2
    return _run(_kernel("ragged_paged_attention", bool(use_kernel)),
                (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs), dict(kw, **dict(tuning)),
                name="ragged_paged_attention")


# ---------------------------------------------------------------------------
# quantized matmul

def quantized_matmul_int8(
    x: torch.Tensor,                 # [batch, in_features]
    w: torch.Tensor,                 # int8 [out_features, in_features]
    scalar: torch.Tensor,            # [out_features]: per-channel weight scale
    zero_point: torch.Tensor | None = None,
    quant_block_size: torch.Tensor | None = None,
    quantize_activation: bool = False,
    batch_block_size: int | None = None,
    out_block_size: int | None = None,
    in_block_size: int | None = None,
) -> torch.Tensor:
    """`x @ dequant(w).T` for an int8 weight w [out_features, in_features]:
    dequant(w)[o, c] = w[o, c] * scalar[o] - zero_point[o] (per-channel
    scales [out_features], zero points optional, in the scales' units), or,
    with `quant_block_size` B, block-wise: the scale and zero point of input
    block c // B, scalar and zero_point [in_features / B, out_features] (B
    may be an int or an int tensor of one element; the block count is read
    from scalar's shape). With `quantize_activation`, x is first quantized per
    row to int8 (scale max|x| / 127), the block products are int8 x int8 ->
    int32 and the result is rescaled by x's scale. -> [..., out_features] in
    x's dtype. One XLA computation on every platform (upstream's TPU kernel
    is its own; pallas_kernels.quantized_matmul_kernel holds it); the block
    sizes are accepted for compatibility."""
    if w.dim() != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"quantized_matmul_int8: x [..., in], w [out, in]; got {tuple(x.shape)}, {tuple(w.shape)}")
    if torch.is_tensor(quant_block_size) and not _api.is_xla_tensor(quant_block_size):
        quant_block_size = int(quant_block_size.reshape(-1)[0])
    # shapes checked here, before the graph is built
    _qmm_kernels._blocks(x, w, scalar, zero_point, quant_block_size)
    return _run(_kernel("quantized_matmul_int8"), (x, w, scalar, zero_point, quant_block_size),
                {"quantize_activation": bool(quantize_activation)}, name="quantized_matmul_int8")


# ---------------------------------------------------------------------------
# grouped matmul (MoE)

def _round_tile(x, limit):
    """A tile for a dimension of size x: a multiple of 128, at least 128; below
    `limit` x rounded up; at or past it the largest multiple of 128 in
    [512, limit] dividing x, else `limit`."""
    if x <= 128:
        return 128
    if x < limit:
        return -(-x // 128) * 128
    return _block(x, limit) if (_block(x, limit) or 0) >= 512 else limit


def _gmm_tiling(m, k, n, g):
    # tokens per expert vary; twice the mean leaves room for imbalance
    tm = min(_round_tile(2 * m // max(g, 1), 512), m)
    return tm, _round_tile(k, 2048), _round_tile(n, 2048)


def _row_groups(group_sizes, m):
    """The group of each of m rows (groups are consecutive runs of rows);
    rows past sum(group_sizes) get len(group_sizes)."""
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    return jnp.searchsorted(ends, jnp.arange(m, dtype=jnp.int32), side="right")


def _offset(group_offset):
    return 0 if group_offset is None else group_offset.reshape(-1)[0].astype(jnp.int32)


@_registry.register("gmm")
def _gmm_reference(lhs, rhs, group_sizes, group_offset, *, tiling, transpose_rhs):
    if transpose_rhs:
        rhs = jnp.swapaxes(rhs, 1, 2)
    local = _row_groups(group_sizes, lhs.shape[0]) - _offset(group_offset)
    onehot = local[None, :] == jnp.arange(rhs.shape[0])[:, None]            # [G, m]
    masked = jnp.where(onehot[:, :, None], lhs[None], jnp.zeros((), lhs.dtype))
    out = jnp.einsum("gmk,gkn->mn", masked, rhs, precision=_HIGHEST, preferred_element_type=jnp.float32)
    return out.astype(lhs.dtype)


@_registry.register("gmm", platform="tpu")
def _gmm_tpu(lhs, rhs, group_sizes, group_offset, *, tiling, transpose_rhs):
    from jax.experimental.pallas.ops.tpu.megablox import ops as mb
    m, k = lhs.shape
    n = rhs.shape[1] if transpose_rhs else rhs.shape[2]
    tm, tk, tn = tiling
    if m % tm or k % tk or n % tn:
        return None
    gs = group_sizes.astype(jnp.int32)
    off = None if group_offset is None else group_offset.reshape(1).astype(jnp.int32)
    return mb.gmm(lhs, rhs, gs, lhs.dtype, (tm, tk, tn), off, None, transpose_rhs)


def gmm(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    tiling: Optional[tuple[int, int, int]] = None,
    group_offset: torch.Tensor | None = None,
    transpose_rhs: bool = False,
) -> torch.Tensor:
    """Grouped matmul: rows lhs[start_i:start_i + group_sizes[i]] times rhs[i]
    for each group i (groups are consecutive runs of rows).

    lhs [m, k]; rhs [groups, k, n] ([groups, n, k] with transpose_rhs);
    group_sizes int [num_groups]. With `group_offset`, rhs holds groups
    group_offset .. group_offset + rhs.shape[0] only (rows of other groups
    give zeros), for an expert-sharded rhs. Rows past sum(group_sizes) are
    zero. Differentiable in lhs and rhs. -> [m, n] in lhs's dtype."""
    if lhs.dim() != 2 or rhs.dim() != 3:
        raise ValueError(f"gmm: lhs [m, k] and rhs [groups, k, n], got {tuple(lhs.shape)} and {tuple(rhs.shape)}")
    kdim = rhs.shape[2] if transpose_rhs else rhs.shape[1]
    if kdim != lhs.shape[1]:
        raise ValueError(f"gmm: lhs {tuple(lhs.shape)} and rhs {tuple(rhs.shape)} (transpose_rhs={transpose_rhs}) "
                         "do not share k")
    m, k, g = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    n = rhs.shape[1] if transpose_rhs else rhs.shape[2]
    if tiling is None:
        tiling = _gmm_tiling(m, k, n, g)
    else:
        tiling = (min(int(tiling[0]), m), int(tiling[1]), int(tiling[2]))
    return _run(_kernel("gmm"), (lhs, rhs, group_sizes, group_offset),
                {"tiling": tuple(tiling), "transpose_rhs": bool(transpose_rhs)}, name="gmm")


@_registry.register("tgmm")
def _tgmm_reference(lhs, rhs, group_sizes, group_offset, *, tiling, num_groups):
    local = _row_groups(group_sizes, lhs.shape[1]) - _offset(group_offset)
    onehot = local[None, :] == jnp.arange(num_groups)[:, None]             # [G, m]
    masked = jnp.where(onehot[:, None, :], lhs[None], jnp.zeros((), lhs.dtype))   # [G, k, m]
    out = jnp.einsum("gkm,mn->gkn", masked, rhs, precision=_HIGHEST, preferred_element_type=jnp.float32)
    return out.astype(lhs.dtype)


@_registry.register("tgmm", platform="tpu")
def _tgmm_tpu(lhs, rhs, group_sizes, group_offset, *, tiling, num_groups):
    from jax.experimental.pallas.ops.tpu.megablox import gmm as mb
    k, m = lhs.shape
    n = rhs.shape[1]
    tm, tk, tn = tiling
    if m % tm or k % tk or n % tn:
        return None
    off = None if group_offset is None else group_offset.reshape(1).astype(jnp.int32)
    return mb.tgmm(lhs, rhs, group_sizes.astype(jnp.int32), lhs.dtype, (tm, tk, tn), off, num_groups)


def tgmm(
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    group_sizes: torch.Tensor,
    tiling: tuple[int, int, int] = (512, 512, 512),
    group_offset: torch.Tensor | None = None,
    num_actual_groups: int | None = None,
) -> torch.Tensor:
    """Transposed grouped matmul (gmm's weight gradient): for each group i,
    lhs[:, rows of i] @ rhs[rows of i, :]. lhs [k, m], rhs [m, n] ->
    [num_actual_groups (default len(group_sizes)), k, n] in lhs's dtype."""
    if lhs.dim() != 2 or rhs.dim() != 2 or lhs.shape[1] != rhs.shape[0]:
        raise ValueError(f"tgmm: lhs [k, m] and rhs [m, n], got {tuple(lhs.shape)} and {tuple(rhs.shape)}")
    k, m = lhs.shape
    n = rhs.shape[1]
    tiling = (min(int(tiling[0]), m), min(int(tiling[1]), k), min(int(tiling[2]), n))
    groups = int(group_sizes.shape[0] if num_actual_groups is None else num_actual_groups)
    return _run(_kernel("tgmm"), (lhs, rhs, group_sizes, group_offset), {"tiling": tiling, "num_groups": groups},
                name="tgmm")


def gmm_backward(grad, lhs, rhs, group_sizes, tiling=(512, 512, 512)):
    """(d lhs, d rhs) of gmm(lhs, rhs, group_sizes) for the output gradient `grad`."""
    grad_lhs = gmm(grad, rhs.transpose(-1, -2), group_sizes, tiling)
    grad_rhs = tgmm(lhs.t(), grad, group_sizes, tiling, num_actual_groups=rhs.shape[0])
    return grad_lhs, grad_rhs


class GMM(torch.autograd.Function):
    """gmm with its backward written as gmm and tgmm (upstream's form);
    `gmm` itself is differentiable too."""

    @staticmethod
    def forward(ctx, lhs, rhs, group_sizes, tiling=(512, 512, 512)):
        ctx.save_for_backward(lhs, rhs, group_sizes)
        ctx.tiling = tiling
        return gmm(lhs.detach(), rhs.detach(), group_sizes, tiling)

    @staticmethod
    def backward(ctx, grad_output):
        lhs, rhs, group_sizes = ctx.saved_tensors
        grad_lhs, grad_rhs = gmm_backward(grad_output, lhs, rhs, group_sizes, ctx.tiling)
        return grad_lhs, grad_rhs, None, None


# ---------------------------------------------------------------------------
# your own Pallas kernel

def _interpret_pallas_calls():
    """A context in which every `pl.pallas_call` runs in Pallas's interpreter
    (kernels written for a TPU or GPU then run on the CPU)."""
    import contextlib
    from jax.experimental import pallas as pl

    @contextlib.contextmanager
    def ctx():
        original = pl.pallas_call

        @functools.wraps(original)
        def interpreted(*a, **k):
            k["interpret"] = True
            return original(*a, **k)

        pl.pallas_call = interpreted
        try:
            yield
        finally:
            pl.pallas_call = original
    return ctx()


def _interpret_here():
    """Whether Pallas kernels must be interpreted: the device is neither a TPU nor a GPU."""
    return _api.jax_platform() not in ("tpu",) + _GPU_PLATFORMS


class _PallasCall:
    """A user's Pallas kernel with its static arguments bound: called with JAX
    arrays for the tensors, in order."""

    def __init__(self, kernel, template, static_argnums, static_argnames, kwargs):
        self.kernel = kernel
        self.template = tuple(template)     # args with None where a tensor goes
        self.static_argnums = static_argnums
        self.static_argnames = tuple(static_argnames) if static_argnames is not None else None
        self.kwargs = tuple(sorted(kwargs.items()))
        self.interpret = _interpret_here()
        self._key = (kernel, tuple(("t",) if a is None else ("v", a) for a in self.template),
                     static_argnums if not isinstance(static_argnums, list) else tuple(static_argnums),
                     self.static_argnames, self.kwargs, self.interpret)

    def __call__(self, *arrays):
        it = iter(arrays)
        full = [next(it) if a is None else a for a in self.template]
        jitted = jax.jit(self.kernel, static_argnums=self.static_argnums, static_argnames=self.static_argnames)
        if self.interpret:
            with _interpret_pallas_calls():
                return jitted(*full, **dict(self.kwargs))
        return jitted(*full, **dict(self.kwargs))

    def __eq__(self, other):
        return isinstance(other, _PallasCall) and self._key == other._key

    def __hash__(self):
        try:
            return hash(self._key)
        except TypeError:
            return id(self)


def trace_pallas(kernel: Callable, *args, static_argnums=None, static_argnames=None, use_cache=False, **kwargs):
    """Prepare a Pallas kernel (any JAX function calling `pl.pallas_call`) for
    the tensors `args`: -> (traced, tensor_args), where `traced(*arrays)` runs
    the kernel on JAX arrays for `tensor_args` with every other argument bound
    as given. Upstream returns the TPU custom-call payload here; this package
    runs the kernel through call_jax instead, so `traced` is what
    make_kernel_from_pallas hands to it. On a CPU device the kernel's
    pallas_calls run in Pallas's interpreter."""
    template, tensors = [], []
    for a in args:
        if torch.is_tensor(a):
            template.append(None)
            tensors.append(a)
        else:
            template.append(a)
    # lowers once here so that a kernel that cannot be traced fails at the call, as upstream's does
    traced = _PallasCall(kernel, template, static_argnums, static_argnames, kwargs)
    jax.eval_shape(traced, *[to_jax_shape_dtype_struct(t) for t in tensors])
    return traced, tensors


def make_kernel_from_pallas(kernel: Callable, output_shape_dtype_fn: Callable):
    """A torch function running the Pallas `kernel` on XLA tensors as one graph
    node. `output_shape_dtype_fn(*args)` returns a list of (shape, torch
    dtype), one per output; the returned function gives one tensor or a
    tuple. Keyword arguments and non-tensor positional arguments reach the
    kernel as static values (name them in static_argnums/static_argnames as
    you would for jax.jit)."""

    def run(*args, static_argnums=None, static_argnames=None, **kwargs):
        traced, tensors = trace_pallas(kernel, *args, static_argnums=static_argnums,
                                       static_argnames=static_argnames, **kwargs)
        want = output_shape_dtype_fn(*args)
        if not isinstance(want, list):
            raise TypeError("The output_shape_dtype_fn should return a list.")
        out = _run(traced, tuple(tensors), name=getattr(kernel, "__name__", "pallas"))
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(want):
            raise ValueError(f"make_kernel_from_pallas: the kernel returned {len(outs)} outputs, "
                             f"output_shape_dtype_fn described {len(want)}")
        for i, (o, (shape, dtype)) in enumerate(zip(outs, want)):
            if tuple(o.shape) != tuple(shape) or o.dtype != dtype:
                raise ValueError(f"make_kernel_from_pallas: output {i} is {tuple(o.shape)} {o.dtype}, "
                                 f"output_shape_dtype_fn said {tuple(shape)} {dtype}")
        return outs[0] if len(outs) == 1 else tuple(outs)

    return run


# ---------------------------------------------------------------------------
# helpers

def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor, total_repeat_length: int):
    """`torch.repeat_interleave(input, repeats)` with a static output length:
    cut to `total_repeat_length`, or padded with the last element of `input`
    when the repeats add up to less. A static shape keeps the step one graph
    (no data-dependent size, no host read)."""
    ends = torch.cumsum(repeats, dim=0)
    positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
    # element i covers [ends[i-1], ends[i]); past the end, the last element
    index = torch.searchsorted(ends, positions, right=True).clamp(max=input.shape[0] - 1)
    return input[index]


# ---------------------------------------------------------------------------
# F.scaled_dot_product_attention on a GPU

@_registry.register("scaled_dot_product_attention", platform="gpu")
def _sdpa_cudnn(q, k, v, *, is_causal, scale):
    return _flash_cudnn(q, k, v, None, None, None, is_causal, scale)


@_registry.register("scaled_dot_product_attention")
def _sdpa_reference(q, k, v, *, is_causal, scale):
    return _attention_reference(q, k, v, None, None, None, is_causal, scale)


def _sdpa_fits_fused(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa):
    """Whether cuDNN's fused attention can take this call: 4-d half-precision
    q, k, v with equal heads, no mask, no dropout, a head size cuDNN takes,
    square when causal (torch's causal mask is top-left aligned, as cuDNN's)."""
    return (q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and attn_mask is None and dropout_p == 0.0
            and q.dtype in (torch.float16, torch.bfloat16) and k.dtype == q.dtype and v.dtype == q.dtype
            and q.shape[1] == k.shape[1] == v.shape[1] and q.shape[-1] == k.shape[-1] == v.shape[-1]
            and q.shape[-1] <= 128 and q.shape[-1] % 8 == 0 and (not is_causal or q.shape[2] == k.shape[2])
            and all(_api.is_xla_tensor(t) for t in (q, k, v)))


def _sdpa_xla(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention on XLA tensors: one call_jax node whose
    lowering picks cuDNN's fused attention on a GPU when the call fits, else
    torch's math decomposition (what runs without this hook)."""
    if _sdpa_fits_fused(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa):
        s = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        return _run(_kernel("scaled_dot_product_attention"), (q, k, v), {"is_causal": bool(is_causal), "scale": s},
                    name="sdpa")
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]


_SDPA_LIB = []


def enable_fused_sdpa():
    """Route F.scaled_dot_product_attention on XLA tensors through `_sdpa_xla`
    (registered at the autograd key, above the math decomposition). `import
    torch_xla` does this when the device is a GPU; the CPU keeps torch's
    decomposition."""
    if _SDPA_LIB:
        return
    lib = torch.library.Library("aten", "IMPL", "AutogradPrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa_xla)
    _SDPA_LIB.append(lib)


# ---------------------------------------------------------------------------
# torch.ops.xla registrations (upstream's schemas)

_LIB = []


def _register_ops():
    if _LIB:
        return
    lib = torch.library.Library("xla", "FRAGMENT")
    _LIB.append(lib)

    def flash(q, k, v, casual=False):
        return flash_attention(q, k, v, causal=casual)

    def flash_fake(q, k, v, casual=False):
        return torch.empty_like(q)

    def paged(q, k_pages, v_pages, lengths, page_indices, pages_per_compute_block, megacore_mode=None,
              attn_logits_soft_cap=None):
        return paged_attention(q, k_pages, v_pages, lengths, page_indices, pages_per_compute_block,
                               megacore_mode, attn_logits_soft_cap)

    def paged_fake(q, *a, **k):
        return torch.empty_like(q)

    def mq_paged(q, k_pages, v_pages, lengths, page_indices, effective_q_lens, num_kv_pages_per_compute_block,
                 num_queries_per_compute_block, use_kernel, attn_logits_soft_cap=None):
        return multi_queries_paged_attention(q, k_pages, v_pages, lengths, page_indices, effective_q_lens,
                                             num_kv_pages_per_compute_block, num_queries_per_compute_block,
                                             use_kernel, attn_logits_soft_cap)

    def ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
               soft_cap=None, mask_value=None, k_scale=None, v_scale=None, use_kernel=True,
               num_kv_pages_per_block=None, num_queries_per_block=None, vmem_limit_bytes=None):
        return ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
                                      sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value,
                                      k_scale=k_scale, v_scale=v_scale, use_kernel=use_kernel,
                                      num_kv_pages_per_block=num_kv_pages_per_block,
                                      num_queries_per_block=num_queries_per_block, vmem_limit_bytes=vmem_limit_bytes)

    def gmm_op(lhs, rhs, group_sizes, tiling=None, group_offset=None, transpose_rhs=False):
        return gmm(lhs, rhs, group_sizes, None if tiling is None else tuple(tiling), group_offset, transpose_rhs)

    def gmm_fake(lhs, rhs, group_sizes, tiling=None, group_offset=None, transpose_rhs=False):
        return lhs.new_empty((lhs.shape[0], rhs.shape[1] if transpose_rhs else rhs.shape[2]))

    def qmm(x, w, scalar, zero_point=None, quant_block_size=None, quantize_activation=False,
            batch_block_size=None, out_block_size=None, in_block_size=None):
        return quantized_matmul_int8(x, w, scalar, zero_point, quant_block_size, quantize_activation,
                                     batch_block_size, out_block_size, in_block_size)

    def qmm_fake(x, w, *a, **k):
        return x.new_empty((*x.shape[:-1], w.shape[0]))

    ops = [
        ("flash_attention(Tensor q, Tensor k, Tensor v, bool casual=False) -> Tensor", flash, flash_fake),
        ("paged_attention(Tensor q, Tensor k_pages, Tensor v_pages, Tensor lengths, Tensor page_indices, "
         "int pages_per_compute_block, str? megacore_mode=None, float? attn_logits_soft_cap=None) -> Tensor",
         paged, paged_fake),
        ("multi_queries_paged_attention(Tensor q, Tensor k_pages, Tensor v_pages, Tensor lengths, "
         "Tensor page_indices, Tensor effective_q_lens, int num_kv_pages_per_compute_block, "
         "int num_queries_per_compute_block, bool use_kernel, float? attn_logits_soft_cap=None) -> Tensor",
         mq_paged, paged_fake),
        ("ragged_paged_attention(Tensor q, Tensor kv_pages, Tensor kv_lens, Tensor page_indices, "
         "Tensor cu_q_lens, Tensor num_seqs, float sm_scale=1, int? sliding_window=None, float? soft_cap=None, "
         "float? mask_value=None, float? k_scale=None, float? v_scale=None, bool use_kernel=True, "
         "int? num_kv_pages_per_block=None, int? num_queries_per_block=None, int? vmem_limit_bytes=None) -> Tensor",
         ragged, paged_fake),
        ("gmm(Tensor lhs, Tensor rhs, Tensor group_sizes, int[]? tiling=None, Tensor? group_offset=None, "
         "bool transpose_rhs=False) -> Tensor", gmm_op, gmm_fake),
        ("quantized_matmul_int8(Tensor x, Tensor w, Tensor scalar, Tensor? zero_point=None, "
         "Tensor? quant_block_size=None, bool quantize_activation=False, int? batch_block_size=None, "
         "int? out_block_size=None, int? in_block_size=None) -> Tensor", qmm, qmm_fake),
    ]
    for schema, fn, fake in ops:
        name = schema.split("(", 1)[0]
        if hasattr(torch.ops.xla, name) and torch._C._dispatch_has_kernel_for_dispatch_key(
                f"xla::{name}", "CompositeExplicitAutograd"):
            continue   # registered already (another copy of this module)
        lib.define(schema)
        # CPU tensors: the reference on the host; meta tensors: shapes
        lib.impl(name, fn, "CompositeExplicitAutograd")
        if hasattr(torch.library, "register_fake"):
            torch.library.register_fake(f"xla::{name}", fake, lib=lib)
        # XLA tensors dispatch in Python: the same function is their kernel
        _api.register_op_handler(getattr(torch.ops.xla, name).default, fn)


_register_ops()
