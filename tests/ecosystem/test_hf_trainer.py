"""Hugging Face: transformers.Trainer trains a GPT-2-style model (built from a config) on
the XLA device with the losses of eager PyTorch on the CPU, in one process and under
torch_xla.launch; accelerate detects a one-process run; .to(xla) keeps tied weights."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_hf_gpt2.py"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "USE_TORCH_XLA")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env


def _train(tmp_path, name, env, *args, timeout=300):
    out = tmp_path / f"{name}.json"
    p = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3", "--workdir", str(tmp_path / name),
                        "--out", str(out), *args], capture_output=True, text=True, env=env,
                       timeout=timeout, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads(out.read_text())


def _close(a, b, tol=2e-5):
    assert len(a) == len(b) == 3
    assert all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b)), (a, b)


def test_trainer_gpt2_one_process_matches_eager(tmp_path):
    ref = _train(tmp_path, "eager", _env(USE_TORCH_XLA="0"))
    ours = _train(tmp_path, "xla", _env(PJRT_DEVICE="CPU"))
    assert ref["device"] == "cpu" and ours["device"] == "xla:0"
    _close(ours["losses"], ref["losses"])


@pytest.mark.slow
def test_trainer_gpt2_four_processes_match_eager(tmp_path):
    # 4 replicas x batch 2, sequential sampling: the same steps as one process with batch 8
    ref = _train(tmp_path, "eager", _env(USE_TORCH_XLA="0"), "--batch", "8")
    ours = _train(tmp_path, "xla4", _env(), "--nprocs", "4", "--batch", "2", timeout=560)
    assert ours["world"] == 4 and ours["device"] == "xla:0"
    _close(ours["losses"], ref["losses"])


def test_gpt2_tied_weights_survive_to_xla():
    import torch
    import torch_xla
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    assert model.lm_head.weight is model.transformer.wte.weight
    ref = model.transformer.wte.weight.detach().clone()
    model.to(torch_xla.device())
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.device.type == "xla"
    torch.testing.assert_close(model.lm_head.weight.cpu(), ref)
    assert sum(1 for _ in model.parameters()) == len({id(p) for p in model.parameters()})


def test_module_to_xla_keeps_parameter_identity():
    # nn.Module._apply swaps the device copy into each existing Parameter, as eager
    # CUDA keeps them: ties, an optimizer built before the move, grads moved along
    import torch
    import torch.nn as nn
    import torch_xla

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    m = Tied()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    before = m.emb.weight
    m.emb.weight.grad = torch.ones(10, 4)
    m.to(torch_xla.device())
    assert m.emb.weight is before and m.head.weight is before
    assert isinstance(before, nn.Parameter) and before.device.type == "xla" and before.grad.device.type == "xla"
    assert opt.param_groups[0]["params"][0] is before
    ref = m.emb.weight.detach().cpu().clone()
    opt.step()
    torch.testing.assert_close(m.head.weight.detach().cpu(), ref - 0.5)


def test_accelerate_one_process_state():
    pytest.importorskip("accelerate")
    code = ("from accelerate import Accelerator\n"
            "a = Accelerator()\n"
            "print(a.device, a.local_process_index, a.process_index, a.num_processes, a.distributed_type)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                       env=_env(PJRT_DEVICE="CPU"))
    assert p.returncode == 0, p.stderr[-3000:]
    device, local, index, num, dtype = p.stdout.split()[-5:]
    assert (device, local, index, num) == ("xla:0", "0", "0", "1"), p.stdout
    assert dtype.endswith("XLA")
