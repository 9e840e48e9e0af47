"""XLA_USE_BF16 / XLA_DOWNCAST_BF16: float tensors are stored as bf16 on the
device, keep their PyTorch dtype, and the IR text shows the stored type."""
import os
import subprocess
import sys
import textwrap

import pytest

CODE = textwrap.dedent("""
    import torch, torch_xla
    a = torch.tensor([7.0, 9.0], dtype=torch.{dtype}, device="xla")
    b = torch.tensor([2.0, 4.0], dtype=torch.{dtype}, device="xla")
    c = torch.floor_divide(a, b)
    text = torch_xla._XLAC._get_xla_tensors_text([c]).splitlines()
    print(text[1]); print(text[3]); print(c.dtype, c.cpu().tolist())
""")


@pytest.mark.parametrize("env,dtype,stored", [
    ("XLA_USE_BF16", "float64", "bf16"), ("XLA_USE_BF16", "float32", "bf16"),
    ("XLA_DOWNCAST_BF16", "float32", "bf16"), ("XLA_DOWNCAST_BF16", "float64", "f32"),
])
def test_narrowed_storage_shows_in_the_ir_text(env, dtype, stored):
    out = subprocess.run([sys.executable, "-c", CODE.format(dtype=dtype)], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, **{env: "1"}))
    assert out.returncode == 0, out.stderr[-2000:]
    data_line, op_line, result = out.stdout.splitlines()[:3]
    assert "xla::device_data" in data_line and f"{stored}[2]" in data_line
    assert "aten::floor_divide" in op_line and f"{stored}[2]" in op_line
    assert result == f"torch.{dtype} [3.0, 2.0]"
