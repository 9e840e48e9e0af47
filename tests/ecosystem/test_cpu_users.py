"""Installing torch_xla must not change what a plain CPU user of Lightning,
transformers or DataLoader sees: each case runs the user's script in a fresh
process, as that user would, with no PJRT_DEVICE set."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch


def _run(code, env_extra=None, timeout=240):
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_pin_memory_on_cpu_data():
    import torch_xla  # noqa: F401
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.arange(12.0).reshape(6, 2)
    batches = list(DataLoader(TensorDataset(x), batch_size=3, pin_memory=True))
    torch.testing.assert_close(torch.cat([b[0] for b in batches]), x)
    pinned = x.pin_memory()
    torch.testing.assert_close(pinned, x)
    assert pinned.data_ptr() != x.data_ptr()  # a copy, as pinning makes one


def test_data_parallel_on_a_cpu_machine_stays_on_the_cpu():
    # torch picks DataParallel's device from torch.<privateuse1>.is_available();
    # importing torch_xla must leave a CPU model where it is, as upstream does.
    import torch_xla  # noqa: F401
    model = torch.nn.Linear(2, 3)
    dp = torch.nn.DataParallel(model)
    assert dp.device_ids == [] and next(dp.parameters()).device.type == "cpu"
    x = torch.ones(4, 2)
    torch.testing.assert_close(dp(x), model(x))


def test_torch_device_type_tests_see_xla_once():
    # torch's device-generic test machinery adds a PRIVATEUSE1 class for an
    # "available" PrivateUse1 backend; upstream's suite adds its own XLA class,
    # so the same device would be tested twice.
    import torch_xla  # noqa: F401
    from torch.testing._internal import common_device_type as cdt
    assert cdt.PrivateUse1TestBase not in cdt.get_device_type_test_bases()


def test_tpu_probes_report_no_tpu_without_pjrt_device(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    from torch_xla._internal import tpu
    assert tpu.num_available_chips() == 0
    assert tpu.num_available_devices() == 0
    with pytest.raises(EnvironmentError):
        tpu.version()


def test_device_count_follows_pjrt_device(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "3")
    from torch_xla._internal import tpu
    assert tpu.num_available_devices() == 3


def test_spmd_module_imports_and_sharding_outside_spmd_mode_is_a_clear_error():
    import torch_xla.distributed.spmd as xs   # transformers imports it unconditionally
    with pytest.raises(RuntimeError, match=r"use_spmd\(\) first"):
        xs.mark_sharding(torch.zeros(2, device="xla"), None, (0,))


def test_lightning_cpu_trainer_unchanged():
    pytest.importorskip("pytorch_lightning")
    out = _run("""
        import torch, torch_xla
        import pytorch_lightning as pl
        from torch.utils.data import DataLoader, TensorDataset

        class M(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.l = torch.nn.Linear(4, 1)
            def training_step(self, b, i):
                x, y = b
                return torch.nn.functional.mse_loss(self.l(x), y)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
        t = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                       enable_progress_bar=False, enable_model_summary=False)
        t.fit(M(), DataLoader(ds, batch_size=4, pin_memory=True))
        print("ACC", type(t.accelerator).__name__, t.global_step)
    """)
    assert "ACC CPUAccelerator 4" in out


def test_transformers_trainer_imports():
    pytest.importorskip("transformers")
    out = _run("""
        import torch_xla
        from transformers import Trainer, TrainingArguments
        print("OK", Trainer.__name__)
    """)
    assert "OK Trainer" in out


def test_importing_and_using_torch_xla_leaves_the_environment_alone():
    # JAX writes TF_CPP_MIN_LOG_LEVEL on import and TPU_SKIP_MDS_QUERY when its backend
    # starts; Lightning's test fixtures fail on variables a library leaked
    out = _run("""
        import os
        before = dict(os.environ)
        import torch, torch_xla
        assert torch_xla.core.xla_model.xla_device_hw("xla:0") == "CPU"
        (torch.ones(2, device="xla") + 1).cpu()
        changed = {k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)}
        changed.discard("TORCHINDUCTOR_CACHE_DIR")   # torch's own, when Dynamo loads
        print("changed", sorted(changed))
    """, {"PJRT_DEVICE": "CPU"})
    assert "changed []" in out, out
