"""torch_xla.experimental.pallas_kernels (upstream's JAX-level kernel modules)
and the per-platform kernel table custom_kernel uses, on the CPU: each
function against an eager reference written here (or custom_kernel's, which is
tested against eager PyTorch), the checks upstream's callers rely on, the
table's choice by lowering platform, and that importing the modules loads no
Pallas code."""
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_xla.experimental.custom_kernel as ck
from torch_xla.experimental.pallas_kernels import _registry
from torch_xla.experimental.pallas_kernels import multi_queries_paged_attention_kernel as mq
from torch_xla.experimental.pallas_kernels import ragged_paged_attention_kernel as rpa1
from torch_xla.experimental.pallas_kernels import ragged_paged_attention_v2 as rpa2

from test_custom_kernels import ref_mq_paged, ref_ragged


def _j(t):
    return jnp.asarray(t.numpy())


def _t(a):
    return torch.from_numpy(np.array(a))


def _close(got, want, atol=2e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got, want, atol=atol, rtol=1e-5), (got - want).abs().max()


def test_import_loads_no_pallas():
    code = ("import sys\n"
            "import torch_xla.experimental.pallas_kernels.ragged_paged_attention_kernel\n"
            "import torch_xla.experimental.pallas_kernels.ragged_paged_attention_v2\n"
            "import torch_xla.experimental.pallas_kernels.multi_queries_paged_attention_kernel\n"
            "import torch_xla.experimental.pallas_kernels.quantized_matmul_kernel\n"
            "print([m for m in sys.modules if m.startswith('jax.experimental.pallas')])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# -- the table -------------------------------------------------------------------

def test_registry_choice_and_fallback():
    name = "test_pallas_kernels_toy"
    _registry.register(name)(lambda x: ("reference", x))
    _registry.register(name, platform="tpu")(lambda x: None if x < 0 else (
        (_ for _ in ()).throw(ValueError("block")) if x == 0 else ("tpu", x)))
    _registry.register(name, platform="gpu")(lambda x: ("gpu", x))
    assert _registry.call(name, "tpu", 1) == ("tpu", 1)
    assert _registry.call(name, "tpu", -1) == ("reference", -1)          # does not fit: the reference
    with pytest.warns(UserWarning, match="block"):
        assert _registry.call(name, "tpu", 0) == ("reference", 0)        # not usable: warned, the reference
    assert _registry.call(name, "cuda", 1) == _registry.call(name, "rocm", 1) == ("gpu", 1)
    assert _registry.call(name, "cpu", 1) == _registry.call(name, None, 1) == ("reference", 1)


def test_custom_kernel_tables():
    for name in ("flash_attention", "paged_attention", "multi_queries_paged_attention", "ragged_paged_attention",
                 "gmm", "tgmm", "quantized_matmul_int8", "scaled_dot_product_attention"):
        assert _registry.DEFAULT in _registry.builders(name), name
    for name in ("flash_attention", "paged_attention", "ragged_paged_attention", "gmm", "tgmm"):
        assert "tpu" in _registry.builders(name), name
    assert {"cuda", "rocm", "gpu"} <= set(_registry.builders("flash_attention"))
    assert {"cuda", "rocm", "gpu"} <= set(_registry.builders("scaled_dot_product_attention"))


def test_kernel_is_chosen_by_the_lowering_platform(monkeypatch):
    seen = []
    table = _registry._TABLES["gmm"]
    monkeypatch.setitem(table, "tpu", lambda *a, **k: seen.append("tpu") or None)
    lhs, rhs, sizes = jnp.ones((4, 3)), jnp.ones((2, 3, 5)), jnp.array([1, 3], jnp.int32)
    run = ck._kernel("gmm")
    monkeypatch.setattr(ck._api, "lowering_platform", lambda: "cpu")
    run(lhs, rhs, sizes, None, tiling=(128, 128, 128), transpose_rhs=False)
    assert seen == []
    monkeypatch.setattr(ck._api, "lowering_platform", lambda: "tpu")
    out = run(lhs, rhs, sizes, None, tiling=(128, 128, 128), transpose_rhs=False)
    assert seen == ["tpu"] and out.shape == (4, 5)                       # it returned None: the reference ran
    seen.clear()
    ck._kernel("ragged_paged_attention", False)                          # use_kernel=False: no table lookup
    monkeypatch.setitem(_registry._TABLES["ragged_paged_attention"], "tpu", lambda *a, **k: seen.append(1))
    kv = jnp.ones((4, 2, 2, 8))
    ck._kernel("ragged_paged_attention", False)(jnp.ones((3, 1, 8)), kv, jnp.array([3, 0], jnp.int32),
                                                jnp.zeros((2, 2), jnp.int32), jnp.array([0, 3, 3], jnp.int32),
                                                jnp.array([1], jnp.int32))
    assert seen == []


# -- ragged paged attention ------------------------------------------------------

def _ragged_case(seed=3):
    g = torch.Generator().manual_seed(seed)
    kvh, d, ps = 2, 8, 4
    k_pages = torch.randn(kvh, 16, ps, d, generator=g)         # the first version's layout
    v_pages = torch.randn(kvh, 16, ps, d, generator=g)
    q = torch.randn(12, 4, d, generator=g)                      # 10 real tokens, 2 padding rows
    kv_lens = torch.tensor([6, 9, 3] + [0] * 9, dtype=torch.int32)
    cu = torch.tensor([0, 1, 7, 10] + [10] * 9, dtype=torch.int32)
    pages = torch.zeros(12, 3, dtype=torch.int32)
    pages[:3] = torch.tensor([[5, 2, 0], [1, 3, 8], [12, 0, 0]])
    # the second version's layout: K and V heads interleaved
    kv_pages = torch.stack([k_pages, v_pages], 3).permute(1, 2, 0, 3, 4).reshape(16, ps, 2 * kvh, d)
    return q, k_pages, v_pages, kv_pages, kv_lens, cu, pages


def test_ragged_v2_and_reference():
    q, _, _, kv_pages, kv_lens, cu, pages = _ragged_case()
    num_seqs = torch.tensor([3], dtype=torch.int32)
    want = ref_ragged(q, kv_pages, kv_lens, pages, cu, num_seqs, 0.5, 4, 3.0)
    args = [_j(t) for t in (q, kv_pages, kv_lens, pages, cu, num_seqs)]
    for fn in (rpa2.ragged_paged_attention, rpa2.ref_ragged_paged_attention):
        out = _t(fn(*args, sm_scale=0.5, sliding_window=4, soft_cap=3.0))
        _close(out[:10], want)
        assert torch.equal(out[10:], torch.zeros(2, 4, 8))
    # int64 index arrays (JAX's default under x64) are taken
    args64 = args[:2] + [a.astype(jnp.int64) for a in args[2:]]
    _close(_t(rpa2.ragged_paged_attention(*args64, sm_scale=0.5))[:10],
           ref_ragged(q, kv_pages, kv_lens, pages, cu, num_seqs, 0.5))
    with pytest.raises(ValueError, match="sliding_window"):
        rpa2.ragged_paged_attention(*args, sliding_window=0)
    with pytest.raises(ValueError, match="q_len"):
        rpa2.dynamic_validate_inputs(*[_j(t) for t in (q, kv_pages, torch.tensor([6, 1] + [0] * 10,
                                                        dtype=torch.int32))], *args[3:])
    assert rpa2.next_power_of_2(5) == 8 and rpa2.cdiv(7, 2) == 4 and rpa2.get_dtype_packing(jnp.bfloat16) == 2


def test_ragged_reference_in_chunks(monkeypatch):
    """Long caches are processed a few tokens at a time: the same result."""
    q, _, _, kv_pages, kv_lens, cu, pages = _ragged_case(4)
    num_seqs = torch.tensor([3], dtype=torch.int32)
    args = [_j(t) for t in (q, kv_pages, kv_lens, pages, cu, num_seqs)]
    whole = rpa2.ref_ragged_paged_attention(*args)
    monkeypatch.setattr(rpa2, "_REFERENCE_CHUNK_ELEMENTS", 1000)
    _close(_t(rpa2.ref_ragged_paged_attention(*args)), _t(whole))


def test_ragged_first_version():
    q, k_pages, v_pages, kv_pages, kv_lens, cu, pages = _ragged_case()
    pages128 = torch.zeros(12, 128, dtype=torch.int32)          # the kernel's block: 128 pages
    pages128[:, :3] = pages
    err, out = rpa1.ragged_paged_attention(*[_j(t) for t in (q, k_pages, v_pages, kv_lens, pages128, cu)], 3,
                                           sm_scale=0.5)
    err.throw()
    want = ref_ragged(q, kv_pages, kv_lens, pages, cu, torch.tensor([3]), 0.5)
    _close(_t(out)[:10], want)
    assert rpa1.DEFAULT_MASK_VALUE == ck.DEFAULT_MASK_VALUE
    # a sequence with more queries than cached tokens: the checkify error
    bad = kv_lens.clone()
    bad[1] = 2
    err, _ = rpa1.ragged_paged_attention(*[_j(t) for t in (q, k_pages, v_pages, bad, pages128, cu)], 3)
    with pytest.raises(ValueError, match="cur_q_len must be less or equal to cur_kv_len"):
        err.throw()
    with pytest.raises(ValueError, match="multiple of 128"):
        rpa1.ragged_paged_attention(*[_j(t) for t in (q, k_pages, v_pages, kv_lens, pages128, cu)], 3,
                                    num_kv_pages_per_block=64)


def test_make_sequence_metadata():
    # sequences of 192, 256 and 64 rows in 128-row tiles: tile 1 is shared by
    # sequences 0 and 1, tile 3 by 1 and 2
    cu = jnp.array([0, 192, 448, 512] + [512] * 508, jnp.int32)
    (seq_ids, tile_ids), n = rpa1.make_sequence_metadata(cu_q_lens=cu, m=512, tm=128,
                                                         start_sequence=jnp.array([0]), num_sequences=3)
    assert int(n) == 6
    assert seq_ids.tolist() == [0, 0, 1, 1, 1, 2]
    assert tile_ids.tolist() == [0, 1, 1, 2, 3, 3]
    # aligned sequences share no tile
    (seq_ids, tile_ids), n = rpa1.make_sequence_metadata(cu_q_lens=jnp.array([0, 128, 384], jnp.int32), m=384,
                                                         tm=128, start_sequence=jnp.array([0]), num_sequences=2)
    assert int(n) == 3 and seq_ids.tolist() == [0, 1, 1, 1] and tile_ids.tolist() == [0, 1, 2, 2]


# -- multi-query paged attention -------------------------------------------------

def test_multi_queries_paged_attention():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 4, 8, generator=g)
    k_pages = torch.randn(2, 10, 4, 8, generator=g)
    v_pages = torch.randn(2, 10, 4, 8, generator=g)
    lengths = torch.tensor([7, 12], dtype=torch.int32)
    pages = torch.tensor([[3, 1, 0, 0], [2, 5, 9, 4]], dtype=torch.int32)
    eff = torch.tensor([2, 4], dtype=torch.int32)
    want = ref_mq_paged(q, k_pages, v_pages, lengths, pages, eff)
    out = mq.paged_attention(*[_j(t) for t in (q, k_pages, v_pages, lengths, pages, eff)],
                             num_kv_pages_per_compute_block=2, num_queries_per_compute_block=4)
    _close(_t(out)[0, :2], want[0, :2])         # sequence 0 has 2 real queries
    _close(_t(out)[1], want[1])
    # custom_kernel's op runs the same reference
    _close(ck.multi_queries_paged_attention(q.to("xla"), k_pages.to("xla"), v_pages.to("xla"), lengths.to("xla"),
                                            pages.to("xla"), eff.to("xla"), 2, 4).cpu(), _t(out))
    with pytest.raises(ValueError, match="divisible"):
        mq.paged_attention(*[_j(t) for t in (q, k_pages, v_pages, lengths, pages, eff)],
                           num_kv_pages_per_compute_block=3)
