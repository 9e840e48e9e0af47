"""torch_xla.experimental.custom_kernel on the CPU device: each kernel against an
eager PyTorch reference written here from the kernel's definition (masks,
segment ids, causal, sm_scale, page tables, ragged sequences, groups), the
gradients of flash_attention and gmm, torch.compile, scan, the torch.ops.xla
registrations and a user's Pallas kernel through the interpreter."""
import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.experimental.custom_kernel as ck
from torch_xla.experimental.custom_kernel import flash_attention, gmm, tgmm

MASK = -0.7 * float(torch.finfo(torch.float32).max)
ATOL = 2e-5


def _close(got, want, atol=ATOL):
    got = got.cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got, want, atol=atol, rtol=1e-5), (got - want).abs().max()


# -- eager references ------------------------------------------------------------

def ref_attention(q, k, v, causal=False, q_seg=None, kv_seg=None, sm_scale=1.0, ab=None):
    logits = q @ k.transpose(-1, -2)
    if ab is not None:
        logits = logits + ab
    logits = logits * sm_scale
    keep = torch.ones(logits.shape, dtype=torch.bool)
    if causal:
        keep &= torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    if q_seg is not None:
        keep &= q_seg[:, None, :, None] == kv_seg[:, None, None, :]
    logits = logits + torch.where(keep, 0.0, MASK)
    return torch.softmax(logits, -1) @ v


def ref_gmm(lhs, rhs, sizes, offset=0, transpose_rhs=False):
    if transpose_rhs:
        rhs = rhs.transpose(1, 2)
    out = torch.zeros(lhs.shape[0], rhs.shape[2])
    start = 0
    for g, size in enumerate(sizes.tolist()):
        if 0 <= g - offset < rhs.shape[0]:
            out[start:start + size] = lhs[start:start + size] @ rhs[g - offset]
        start += size
    return out


def ref_tgmm(lhs, rhs, sizes):
    outs, start = [], 0
    for size in sizes.tolist():
        outs.append(lhs[:, start:start + size] @ rhs[start:start + size])
        start += size
    return torch.stack(outs)


def ref_paged(q, k_pages, v_pages, lengths, page_indices, soft_cap=None):
    b, h, d = q.shape
    kvh, _, ps, _ = k_pages.shape
    outs = []
    for i in range(b):
        n = int(lengths[i])
        pages = page_indices[i, :(n + ps - 1) // ps]
        k = k_pages[:, pages].reshape(kvh, -1, d)[:, :n].repeat_interleave(h // kvh, 0)   # [h, n, d]
        v = v_pages[:, pages].reshape(kvh, -1, d)[:, :n].repeat_interleave(h // kvh, 0)
        logits = torch.einsum("hd,hnd->hn", q[i], k)
        if soft_cap is not None:
            logits = torch.tanh(logits / soft_cap) * soft_cap
        outs.append(torch.einsum("hn,hnd->hd", torch.softmax(logits, -1), v))
    return torch.stack(outs)


def ref_mq_paged(q, k_pages, v_pages, lengths, page_indices, eff):
    b, lq, h, d = q.shape
    kvh, _, ps, _ = k_pages.shape
    outs = []
    for i in range(b):
        n = int(lengths[i])
        pages = page_indices[i, :(n + ps - 1) // ps]
        k = k_pages[:, pages].permute(1, 2, 0, 3).reshape(-1, kvh, d)[:n].repeat_interleave(h // kvh, 1)
        v = v_pages[:, pages].permute(1, 2, 0, 3).reshape(-1, kvh, d)[:n].repeat_interleave(h // kvh, 1)
        logits = torch.einsum("qhd,khd->hqk", q[i], k)
        masked = torch.ones(lq, n).triu(n - int(eff[i]) + 1).bool()
        logits = logits.masked_fill(masked, float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(logits, -1), v))
    return torch.stack(outs)


def ref_ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0, sliding_window=None,
               soft_cap=None):
    kvh = kv_pages.shape[2] // 2
    d = q.shape[-1]
    outs = []
    for s in range(int(num_seqs[0])):
        a, b = int(cu_q_lens[s]), int(cu_q_lens[s + 1])
        n, ql = int(kv_lens[s]), b - a
        rep = q.shape[1] // kvh
        k = kv_pages[page_indices[s], :, 0::2].reshape(-1, kvh, d)[:n].repeat_interleave(rep, 1)
        v = kv_pages[page_indices[s], :, 1::2].reshape(-1, kvh, d)[:n].repeat_interleave(rep, 1)
        logits = torch.einsum("qhd,khd->hqk", q[a:b], k) * sm_scale
        if soft_cap is not None:
            logits = soft_cap * torch.tanh(logits / soft_cap)
        masked = torch.ones(ql, n).triu(n - ql + 1).bool()
        if sliding_window is not None:
            masked |= ~torch.ones(ql, n).triu(n - (ql + sliding_window) + 1).bool()
        logits = logits.masked_fill(masked, MASK)
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(logits, -1), v))
    return torch.cat(outs)


def qkv(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(3)]


# -- flash attention -------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sm_scale", [1.0, 0.25])
def test_flash_attention_forward(dev, causal, sm_scale):
    q, k, v = qkv(2, 3, 16, 8)
    out = flash_attention(q.to(dev), k.to(dev), v.to(dev), causal=causal, sm_scale=sm_scale)
    _close(out, ref_attention(q, k, v, causal, sm_scale=sm_scale))


def test_flash_attention_kv_longer_than_q_and_bias(dev):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 8, 4, generator=g)
    k, v = torch.randn(1, 2, 24, 4, generator=g), torch.randn(1, 2, 24, 4, generator=g)
    ab = torch.randn(1, 2, 8, 24, generator=g)
    out = flash_attention(q.to(dev), k.to(dev), v.to(dev), True, sm_scale=0.5, ab=ab.to(dev))
    _close(out, ref_attention(q, k, v, True, sm_scale=0.5, ab=ab))


def test_flash_attention_segment_ids(dev):
    q, k, v = qkv(2, 2, 12, 8, seed=2)
    qs = torch.tensor([[0] * 5 + [1] * 7, [0] * 12], dtype=torch.int32)
    ks = torch.tensor([[0] * 5 + [1] * 7, [0] * 6 + [1] * 6])
    for causal in (False, True):
        out = flash_attention(q.to(dev), k.to(dev), v.to(dev), causal, qs.to(dev), ks.to(dev), 0.3)
        _close(out, ref_attention(q, k, v, causal, qs, ks, 0.3))
    with pytest.raises(ValueError, match="Both q_segment_ids and kv_segment_ids"):
        flash_attention(q.to(dev), k.to(dev), v.to(dev), False, qs.to(dev))


def test_flash_attention_batch_dims_and_bf16(dev):
    q, k, v = qkv(2, 2, 3, 8, 4, seed=3)
    _close(flash_attention(q.to(dev), k.to(dev), v.to(dev), True), ref_attention(q, k, v, True))
    qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
    out = flash_attention(qb.to(dev), kb.to(dev), vb.to(dev), True)
    assert out.dtype == torch.bfloat16
    _close(out.float(), ref_attention(*(t.float() for t in (qb, kb, vb)), True), atol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gradients(dev, causal):
    q, k, v = qkv(2, 2, 16, 8, seed=4)
    qs = torch.tensor([[0] * 9 + [1] * 7, [0] * 16], dtype=torch.int32)
    xs = [t.to(dev).requires_grad_() for t in (q, k, v)]
    cs = [t.clone().requires_grad_() for t in (q, k, v)]
    w = torch.randn(2, 2, 16, 8)
    (flash_attention(*xs, causal, qs.to(dev), qs.to(dev), 0.5) * w.to(dev)).sum().backward()
    (ref_attention(*cs, causal, qs, qs, 0.5) * w).sum().backward()
    for a, b in zip(xs, cs):
        _close(a.grad, b.grad, atol=5e-5)


def test_flash_attention_under_torch_compile(dev):
    q, k, v = qkv(1, 2, 16, 8, seed=5)

    def f(q, k, v):
        return flash_attention(q, k, v, causal=True, sm_scale=0.5) * 2 + 1

    compiled = torch.compile(f, backend="openxla")
    _close(compiled(q.to(dev), k.to(dev), v.to(dev)), ref_attention(q, k, v, True, sm_scale=0.5) * 2 + 1)
    # and differentiated through the compiled function
    xs = [t.to(dev).requires_grad_() for t in (q, k, v)]
    cs = [t.clone().requires_grad_() for t in (q, k, v)]
    compiled(*xs).sum().backward()
    (ref_attention(*cs, True, sm_scale=0.5) * 2 + 1).sum().backward()
    for a, b in zip(xs, cs):
        _close(a.grad, b.grad, atol=5e-5)


def test_flash_attention_op_under_torch_compile(dev):
    q, k, v = qkv(1, 2, 16, 8, seed=6)
    compiled = torch.compile(lambda q, k, v: torch.ops.xla.flash_attention(q, k, v, True) + 1, backend="openxla")
    _close(compiled(q.to(dev), k.to(dev), v.to(dev)), ref_attention(q, k, v, True) + 1)


def test_flash_attention_inside_scan(dev):
    from torch_xla.experimental.scan import scan
    x = torch.randn(3, 1, 2, 8, 4)

    def body(carry, xi):
        y = flash_attention(xi, xi, xi, causal=True)
        return carry + y.sum(), y

    carry, ys = scan(body, torch.zeros((), device=dev), x.to(dev))
    want = torch.stack([ref_attention(xi, xi, xi, True) for xi in x])
    _close(ys, want)
    _close(carry, want.sum().reshape(()), atol=1e-3)


def test_flash_attention_is_one_node(dev):
    import torch_xla.debug.metrics as met
    q, k, v = qkv(1, 1, 8, 4)
    out = flash_attention(q.to(dev), k.to(dev), v.to(dev))
    text = torch_xla._XLAC._get_xla_tensors_text([out])
    assert "call_jax_flash_attention" in text
    assert "softmax" not in text and "matmul" not in text


# -- paged attention -------------------------------------------------------------

def _pages(kvh, total, ps, d, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(kvh, total, ps, d, generator=g), torch.randn(kvh, total, ps, d, generator=g)


@pytest.mark.parametrize("soft_cap", [None, 2.0])
def test_paged_attention(dev, soft_cap):
    kp, vp = _pages(2, 12, 4, 8, 7)
    q = torch.randn(3, 4, 8)                                   # 4 query heads over 2 kv heads
    lengths = torch.tensor([5, 16, 1], dtype=torch.int32)
    pages = torch.tensor([[3, 7, 0, 0], [1, 2, 4, 11], [9, 0, 0, 0]], dtype=torch.int32)
    out = ck.paged_attention(q.to(dev), kp.to(dev), vp.to(dev), lengths.to(dev), pages.to(dev), 2,
                             attn_logits_soft_cap=soft_cap)
    _close(out, ref_paged(q, kp, vp, lengths, pages, soft_cap))
    with pytest.raises(ValueError, match="megacore_mode"):
        ck.paged_attention(q.to(dev), kp.to(dev), vp.to(dev), lengths.to(dev), pages.to(dev), 2, "bad")


def test_multi_queries_paged_attention(dev):
    kp, vp = _pages(2, 10, 4, 8, 8)
    q = torch.randn(2, 3, 4, 8)
    lengths = torch.tensor([7, 12], dtype=torch.int32)
    pages = torch.tensor([[4, 1, 0], [2, 9, 5]], dtype=torch.int32)
    eff = torch.tensor([3, 2], dtype=torch.int32)
    out = ck.multi_queries_paged_attention(q.to(dev), kp.to(dev), vp.to(dev), lengths.to(dev), pages.to(dev),
                                           eff.to(dev), 1, 8)
    want = ref_mq_paged(q, kp, vp, lengths, pages, eff)
    _close(out[0], want[0])
    _close(out[1, :2], want[1, :2])     # the padding query of sequence 1 is not a real token


@pytest.mark.parametrize("sliding_window,soft_cap", [(None, None), (3, None), (None, 5.0)])
def test_ragged_paged_attention(dev, sliding_window, soft_cap):
    g = torch.Generator().manual_seed(9)
    kvh, d, ps = 2, 8, 4
    kv_pages = torch.randn(16, ps, 2 * kvh, d, generator=g)
    q = torch.randn(12, 4, d, generator=g)                      # 10 real tokens, 2 padding rows
    kv_lens = torch.tensor([6, 9, 3, 0], dtype=torch.int32)     # a decode, a prefill chunk, a fresh prefill
    cu = torch.tensor([0, 1, 7, 10, 10], dtype=torch.int32)
    pages = torch.tensor([[5, 2, 0], [1, 3, 8], [12, 0, 0], [0, 0, 0]], dtype=torch.int32)
    num_seqs = torch.tensor([3], dtype=torch.int32)
    out = ck.ragged_paged_attention(q.to(dev), kv_pages.to(dev), kv_lens.to(dev), pages.to(dev), cu.to(dev),
                                    num_seqs.to(dev), sm_scale=0.4, sliding_window=sliding_window,
                                    soft_cap=soft_cap)
    want = ref_ragged(q, kv_pages, kv_lens, pages, cu, num_seqs, 0.4, sliding_window, soft_cap)
    assert out.shape == q.shape
    _close(out[:10], want)
    assert torch.equal(out[10:].cpu(), torch.zeros(2, 4, d))


# -- grouped matmul --------------------------------------------------------------

@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_gmm_forward(dev, transpose_rhs):
    lhs = torch.randn(14, 6)
    rhs = torch.randn(4, 5, 6) if transpose_rhs else torch.randn(4, 6, 5)
    sizes = torch.tensor([3, 0, 6, 3], dtype=torch.int32)   # 12 of 14 rows: the last two are zero
    out = gmm(lhs.to(dev), rhs.to(dev), sizes.to(dev), transpose_rhs=transpose_rhs)
    _close(out, ref_gmm(lhs, rhs, sizes, transpose_rhs=transpose_rhs))


def test_gmm_group_offset(dev):
    lhs, rhs = torch.randn(10, 4), torch.randn(2, 4, 3)       # rhs holds groups 1 and 2 of 4
    sizes = torch.tensor([2, 3, 4, 1], dtype=torch.int32)
    out = gmm(lhs.to(dev), rhs.to(dev), sizes.to(dev), group_offset=torch.tensor([1], dtype=torch.int32).to(dev))
    _close(out, ref_gmm(lhs, rhs, sizes, offset=1))


def test_tgmm(dev):
    lhs, rhs = torch.randn(5, 12), torch.randn(12, 3)
    sizes = torch.tensor([4, 0, 8], dtype=torch.int32)
    _close(tgmm(lhs.to(dev), rhs.to(dev), sizes.to(dev)), ref_tgmm(lhs, rhs, sizes))


def test_gmm_gradients_and_GMM(dev):
    lhs, rhs = torch.randn(12, 6), torch.randn(3, 6, 4)
    sizes = torch.tensor([5, 4, 3], dtype=torch.int32)
    w = torch.randn(12, 4)
    cl, cr = lhs.clone().requires_grad_(), rhs.clone().requires_grad_()
    (ref_gmm(cl, cr, sizes) * w).sum().backward()
    for fn in (lambda a, b, s: gmm(a, b, s), lambda a, b, s: ck.GMM.apply(a, b, s)):
        xl, xr = lhs.to(dev).requires_grad_(), rhs.to(dev).requires_grad_()
        (fn(xl, xr, sizes.to(dev)) * w.to(dev)).sum().backward()
        _close(xl.grad, cl.grad)
        _close(xr.grad, cr.grad)
    gl, gr = ck.gmm_backward(w.to(dev), lhs.to(dev), rhs.to(dev), sizes.to(dev))
    _close(gl, cl.grad)
    _close(gr, cr.grad)


def test_gmm_under_torch_compile(dev):
    lhs, rhs = torch.randn(8, 4), torch.randn(2, 4, 3)
    sizes = torch.tensor([3, 5], dtype=torch.int32)
    compiled = torch.compile(lambda a, b, s: gmm(a, b, s) + 1, backend="openxla")
    _close(compiled(lhs.to(dev), rhs.to(dev), sizes.to(dev)), ref_gmm(lhs, rhs, sizes) + 1)


# -- quantized matmul ------------------------------------------------------------

def ref_quantized_matmul(x, w, scale, zero_point=None, block=None, quantize_activation=False):
    """x @ dequant(w).T with dequant(w)[o, c] = w[o, c] * scale - zero_point, the
    scale and zero point of c's block ([in / block, out]) or of o alone."""
    out_f, in_f = w.shape
    per_col = lambda t: t[:, None].expand(out_f, in_f) if block is None else t.t().repeat_interleave(block, 1)
    w_deq = w.double() * per_col(scale.double())
    if zero_point is not None:
        w_deq = w_deq - per_col(zero_point.double())
    xd = x.double()
    if quantize_activation:
        xs = xd.abs().amax(-1, keepdim=True) / 127
        xd = torch.round(xd / xs) * xs
    return (xd @ w_deq.t()).float()


@pytest.mark.parametrize("quantize_activation", [False, True])
def test_quantized_matmul_int8(dev, quantize_activation):
    torch.manual_seed(0)
    x = torch.randn(4, 16)
    w = torch.randint(-128, 128, (8, 16), dtype=torch.int8)
    scale = torch.rand(8) / 50
    out = ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev), quantize_activation=quantize_activation)
    if quantize_activation:
        xs = x.abs().amax(-1, keepdim=True) / 127
        xq = torch.round(x / xs).to(torch.int8)
        want = (xq.int() @ w.int().t()).float() * scale * xs
    else:
        want = (x @ w.float().t()) * scale
    _close(out, want, atol=1e-4)


@pytest.mark.parametrize("quantize_activation", [False, True])
@pytest.mark.parametrize("block", [None, 4, "tensor"])
@pytest.mark.parametrize("with_zero_point", [False, True])
def test_quantized_matmul_int8_zero_point_and_blocks(dev, quantize_activation, block, with_zero_point):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 16)                       # leading dims are kept
    w = torch.randint(-128, 128, (8, 16), dtype=torch.int8)
    size = None if block is None else 4
    shape = (8,) if size is None else (16 // size, 8)
    scale = torch.rand(shape) / 50
    zp = torch.randn(shape) / 10 if with_zero_point else None
    qbs = torch.tensor([4], dtype=torch.int32).to(dev) if block == "tensor" else size
    out = ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev), None if zp is None else zp.to(dev), qbs,
                                   quantize_activation)
    assert out.shape == (2, 3, 8) and out.dtype == torch.float32
    _close(out, ref_quantized_matmul(x, w, scale, zp, size, quantize_activation), atol=1e-4)
    # the upstream op schema takes them too
    op = torch.ops.xla.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev),
                                             None if zp is None else zp.to(dev),
                                             None if size is None else torch.tensor([size], dtype=torch.int32),
                                             quantize_activation)
    _close(op, ref_quantized_matmul(x, w, scale, zp, size, quantize_activation), atol=1e-4)


def test_quantized_matmul_int8_bf16_and_shape_errors(dev):
    x = torch.randn(4, 16).to(torch.bfloat16)
    w = torch.randint(-128, 128, (8, 16), dtype=torch.int8)
    scale = torch.rand(2, 8) / 50
    out = ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev), quant_block_size=8)
    assert out.dtype == torch.bfloat16
    _close(out.float(), ref_quantized_matmul(x.float(), w, scale, block=8), atol=2e-2)
    with pytest.raises(ValueError):     # block-wise scales without a block size
        ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev))
    with pytest.raises(ValueError):     # a block size the scales do not match
        ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev), quant_block_size=4)
    with pytest.raises(ValueError):     # zero points of another shape than the scales
        ck.quantized_matmul_int8(x.to(dev), w.to(dev), scale.to(dev), torch.zeros(8).to(dev), 8)


def test_pallas_kernels_quantized_matmul_jax_level():
    """The JAX-level function keeps upstream's contract (block sizes required)
    and runs the same computation."""
    import jax.numpy as jnp
    from torch_xla.experimental.pallas_kernels import quantized_matmul_kernel as qk
    torch.manual_seed(2)
    x = torch.randn(4, 16)
    w = torch.randint(-128, 128, (8, 16), dtype=torch.int8)
    scale, zp = torch.rand(4, 8) / 50, torch.randn(4, 8) / 10
    got = qk.quantized_matmul_int8(jnp.asarray(x.numpy()), jnp.asarray(w.numpy()), jnp.asarray(scale.numpy()),
                                   jnp.asarray(zp.numpy()), jnp.asarray([4], jnp.int32), True,
                                   batch_block_size=128, out_block_size=128, in_block_size=128)
    _close(torch.from_numpy(np.array(got)), ref_quantized_matmul(x, w, scale, zp, 4, True), atol=1e-4)
    with pytest.raises(AssertionError):
        qk.quantized_matmul_int8(jnp.asarray(x.numpy()), jnp.asarray(w.numpy()), jnp.asarray(scale[0].numpy()))
    assert qk.get_tuned_block_sizes(qk.TUNED_BLOCK_SIZES, 3, 5, 7, "bfloat16", True) == (None, None, None)


# -- torch.ops.xla ---------------------------------------------------------------

def test_torch_ops_xla_registrations(dev):
    q, k, v = qkv(1, 2, 8, 4, seed=10)
    want = ref_attention(q, k, v, True)
    _close(torch.ops.xla.flash_attention(q.to(dev), k.to(dev), v.to(dev), True), want)
    _close(torch.ops.xla.flash_attention(q, k, v, True), want)          # CPU tensors: the host reference
    meta = torch.ops.xla.flash_attention(q.to("meta"), k.to("meta"), v.to("meta"))
    assert meta.shape == q.shape and meta.device.type == "meta"

    lhs, rhs = torch.randn(6, 4), torch.randn(2, 4, 3)
    sizes = torch.tensor([2, 4], dtype=torch.int32)
    _close(torch.ops.xla.gmm(lhs.to(dev), rhs.to(dev), sizes.to(dev), [128, 128, 128]), ref_gmm(lhs, rhs, sizes))

    kp, vp = _pages(1, 4, 4, 4, 11)
    qp = torch.randn(2, 2, 4)
    lengths = torch.tensor([3, 8], dtype=torch.int32)
    pages = torch.tensor([[1, 0], [2, 3]], dtype=torch.int32)
    _close(torch.ops.xla.paged_attention(qp.to(dev), kp.to(dev), vp.to(dev), lengths.to(dev), pages.to(dev), 1),
           ref_paged(qp, kp, vp, lengths, pages))
    out = torch.ops.xla.multi_queries_paged_attention(qp[:, None].to(dev), kp.to(dev), vp.to(dev),
                                                      lengths.to(dev), pages.to(dev),
                                                      torch.ones(2, dtype=torch.int32).to(dev), 1, 1, False)
    _close(out[:, 0], ref_paged(qp, kp, vp, lengths, pages))

    kv = torch.randn(4, 4, 2, 4)
    qr = torch.randn(3, 1, 4)
    cu = torch.tensor([0, 1, 3], dtype=torch.int32)
    args = (kv, torch.tensor([2, 5], dtype=torch.int32), torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), cu,
            torch.tensor([2], dtype=torch.int32))
    out = torch.ops.xla.ragged_paged_attention(qr.to(dev), *(a.to(dev) for a in args), sm_scale=0.5)
    _close(out, ref_ragged(qr, *args, sm_scale=0.5))

    x, w, s = torch.randn(2, 8), torch.randint(-5, 5, (3, 8), dtype=torch.int8), torch.rand(3)
    _close(torch.ops.xla.quantized_matmul_int8(x.to(dev), w.to(dev), s.to(dev)), (x @ w.float().t()) * s, 1e-4)


# -- a user's Pallas kernel --------------------------------------------------------

def test_make_kernel_from_pallas_runs_in_the_interpreter(dev):
    import jax
    from jax.experimental import pallas as pl

    def scale_add_kernel(x_ref, y_ref, o_ref, p_ref, *, alpha):
        o_ref[...] = x_ref[...] * alpha + y_ref[...]
        p_ref[...] = x_ref[...] * y_ref[...]

    def scale_add(x, y, alpha):
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(lambda *r: scale_add_kernel(*r, alpha=alpha), out_shape=(shape, shape))(x, y)

    kernel = ck.make_kernel_from_pallas(scale_add, lambda x, y, alpha: [(x.shape, x.dtype)] * 2)
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    out, prod = kernel(x.to(dev), y.to(dev), 3.0, static_argnums=(2,))
    _close(out, x * 3 + y)
    _close(prod, x * y)
    with pytest.raises(ValueError, match="output_shape_dtype_fn"):
        ck.make_kernel_from_pallas(scale_add, lambda x, y, alpha: [(x.shape, torch.int32)] * 2)(
            x.to(dev), y.to(dev), 3.0, static_argnums=(2,))
    traced, tensors = ck.trace_pallas(scale_add, x.to(dev), y.to(dev), 2.0, static_argnums=(2,))
    assert len(tensors) == 2 and callable(traced)


def test_dtype_helpers():
    import jax.numpy as jnp
    assert ck.convert_torch_dtype_to_jax(torch.bfloat16) == jnp.bfloat16
    assert ck.to_jax_shape_dtype_struct(torch.zeros(2, 3, dtype=torch.int8)).shape == (2, 3)
    with pytest.raises(ValueError, match="Unsupported dtype"):
        ck.convert_torch_dtype_to_jax(torch.complex32)
