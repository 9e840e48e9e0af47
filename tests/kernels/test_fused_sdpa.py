"""The GPU hook for F.scaled_dot_product_attention (enable_fused_sdpa), exercised
on the CPU: the node it builds lowers to the reference there (cuDNN is chosen
only when lowering for a GPU), so values and gradients must equal torch's
math path, and calls that do not fit keep the math decomposition. Runs in a
subprocess: the hook is process-wide, and CPU runs never install it."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import torch, torch_xla
    import torch.nn.functional as F
    import torch_xla.experimental.custom_kernel as ck
    ck.enable_fused_sdpa()
    dev = torch_xla.device()
    g = torch.Generator().manual_seed(0)
    for dtype, causal, scale in ((torch.bfloat16, True, None), (torch.float16, False, 0.3)):
        q, k, v = (torch.randn(2, 2, 16, 8, generator=g).to(dtype) for _ in range(3))
        xs = [t.to(dev).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*xs, is_causal=causal, scale=scale)
        assert "call_jax_sdpa" in torch_xla._XLAC._get_xla_tensors_text([out])
        cs = [t.float().requires_grad_() for t in (q, k, v)]
        want = F.scaled_dot_product_attention(*cs, is_causal=causal, scale=scale)
        assert out.dtype == dtype
        assert torch.allclose(out.cpu().float(), want, atol=2e-2), (out.cpu().float() - want).abs().max()
        out.float().sum().backward(); want.sum().backward()
        for a, b in zip(xs, cs):
            assert torch.allclose(a.grad.cpu().float(), b.grad, atol=5e-2), (a.grad.cpu().float() - b.grad).abs().max()
    # float32 or a mask: torch's math decomposition, as without the hook
    q = torch.randn(1, 2, 8, 8, generator=g)
    out = F.scaled_dot_product_attention(q.to(dev), q.to(dev), q.to(dev), is_causal=True)
    assert "call_jax_sdpa" not in torch_xla._XLAC._get_xla_tensors_text([out])
    assert torch.allclose(out.cpu(), F.scaled_dot_product_attention(q, q, q, is_causal=True), atol=1e-5)
    print("SDPA OK")
""")


def test_fused_sdpa_hook_matches_math_path():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PJRT_DEVICE="CPU",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert p.returncode == 0 and "SDPA OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


def test_cpu_import_leaves_sdpa_alone():
    import torch
    import torch_xla  # noqa: F401
    import torch_xla.experimental.custom_kernel as ck
    assert not ck._SDPA_LIB
    q = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16).to("xla")
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert "call_jax_sdpa" not in torch_xla._XLAC._get_xla_tensors_text([out])
