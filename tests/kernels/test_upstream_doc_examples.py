"""The user examples of upstream's Pallas page (docs/source/features/pallas.md),
unchanged, on the CPU device: an add-vectors Pallas kernel adopted with
make_kernel_from_pallas, and the built-in flash attention."""
import torch


def test_pallas_add_vectors_example_unchanged():
    # --- upstream's example, verbatim ---
    from torch_xla.experimental.custom_kernel import jax_import_guard
    jax_import_guard()

    import jax
    from jax.experimental import pallas as pl
    import jax.numpy as jnp

    def add_vectors_kernel(x_ref, y_ref, o_ref):
      x, y = x_ref[...], y_ref[...]
      o_ref[...] = x + y

    @jax.jit
    def add_vectors(x: jax.Array, y: jax.Array) -> jax.Array:
      return pl.pallas_call(add_vectors_kernel,
                            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)
                            )(x, y)

    q = torch.randn(3, 2, 128, 4).to('xla')
    k = torch.randn(3, 2, 128, 4).to('xla')
    v = torch.randn(3, 2, 128, 4).to('xla')

    # Adopts any Pallas kernel
    from torch_xla.experimental.custom_kernel import make_kernel_from_pallas
    pt_kernel = make_kernel_from_pallas(add_vectors, lambda x, y: [(x.shape, x.dtype)])
    output = pt_kernel(q, k)
    # --- end of the example ---
    assert torch.allclose(output.cpu(), q.cpu() + k.cpu())


def test_flash_attention_example_unchanged():
    q = torch.randn(3, 2, 128, 4).to('xla')
    k = torch.randn(3, 2, 128, 4).to('xla')
    v = torch.randn(3, 2, 128, 4).to('xla')
    # --- upstream's example (it uses the name the module defines) ---
    # Use built-in kernels
    import torch_xla.experimental.custom_kernel
    from torch_xla.experimental.custom_kernel import flash_attention
    output = flash_attention(q, k, v)
    # --- end of the example ---
    want = torch.softmax(q.cpu() @ k.cpu().transpose(-1, -2), -1) @ v.cpu()
    assert torch.allclose(output.cpu(), want, atol=1e-5)


def test_paged_attention_example_unchanged():
    query = torch.randn(2, 1, 4, 8).to('xla')            # [batch, 1, heads, dim]
    key_cache = torch.randn(4, 6, 4, 8).to('xla')        # [kv_heads, pages, page_size, dim]
    value_cache = torch.randn(4, 6, 4, 8).to('xla')
    context_lens = torch.tensor([5, 9], dtype=torch.int32).to('xla')
    block_tables = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32).to('xla')
    pages_per_compute_block = 1
    # --- upstream's example, verbatim ---
    # Use built-in kernels
    import torch_xla.experimental.custom_kernel
    output = torch.ops.xla.paged_attention(
        query.squeeze(dim=1),
        key_cache,
        value_cache,
        context_lens,
        block_tables,
        pages_per_compute_block,
        megacore_mode=None,
    )
    # --- end of the example ---
    q, kc, vc = query.cpu().squeeze(1), key_cache.cpu(), value_cache.cpu()
    for b, n in enumerate((5, 9)):
        k = kc[:, block_tables.cpu()[b]].reshape(4, -1, 8)[:, :n]
        v = vc[:, block_tables.cpu()[b]].reshape(4, -1, 8)[:, :n]
        want = torch.einsum("hn,hnd->hd", torch.softmax(torch.einsum("hd,hnd->hn", q[b], k), -1), v)
        assert torch.allclose(output.cpu()[b], want, atol=1e-5)
