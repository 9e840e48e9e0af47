"""torch_xla.experimental.pallas_kernels: upstream's JAX-level kernels.

The modules keep upstream's names and signatures and work on JAX arrays:

  * ragged_paged_attention_kernel: ragged paged attention with separate K and V
    pages (the first version; returns a checkify error and the output);
  * ragged_paged_attention_v2: ragged paged attention over one K/V-interleaved
    cache (the version custom_kernel.ragged_paged_attention calls);
  * multi_queries_paged_attention_kernel: paged attention for several new
    tokens per sequence;
  * quantized_matmul_kernel: int8 weight matmul (w8a16 / w8a8).

Where JAX ships the Pallas TPU kernel (ragged_paged_attention_v2) it runs when
the call is lowered for a TPU; every other platform, and the kernels JAX does
not ship, run an exact XLA reference written here. `_registry` holds the
per-platform table custom_kernel uses too. Importing these modules imports no
Pallas code.
"""
