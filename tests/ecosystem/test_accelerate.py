"""Hugging Face accelerate on our devices: its loader's end-of-data state seen at the
training loop's position through MpDeviceLoader, gather_for_metrics returning exactly the
dataset, accelerate's own test scripts under `accelerate launch`, and Trainer.predict /
evaluate over 2 processes returning every sample once, in order."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

accelerate = pytest.importorskip("accelerate")

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPTS = pathlib.Path(accelerate.__file__).parent / "test_utils" / "scripts"


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "USE_TORCH_XLA", "ACCELERATE_USE_CPU")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(PJRT_DEVICE="CPU", **extra)
    return env


def _launch(script, nprocs, tmp_path, timeout=400):
    """`accelerate launch` as a user types it: one process runs the script itself; more
    go through accelerate's TPU launcher (xmp.spawn of the script's `main`)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no"]
    if nprocs > 1:
        cmd += ["--tpu", "--main_training_function", "main"]
    else:
        cmd += ["--num_processes", "1"]
    p = subprocess.run(cmd + [str(script)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                       env=_env(CPU_NUM_DEVICES=str(nprocs)))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return p.stdout


def _result(out):
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, out[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_mp_device_loader_reports_end_of_data_at_the_loops_position(dev):
    # accelerate's DataLoaderShard flips end_of_dataloader when its own iterator runs out;
    # a loader that read ahead would flip it while the loop still holds earlier batches
    import torch_xla.distributed.parallel_loader as pl
    from accelerate.data_loader import DataLoaderShard
    from accelerate.state import GradientState
    data = torch.arange(10, dtype=torch.float32)
    shard = DataLoaderShard(data, batch_size=3)
    state = GradientState()
    ends, got = [], []
    for batch in pl.MpDeviceLoader(shard, dev):
        assert batch.device.type == "xla"
        ends.append(state.end_of_dataloader)
        got.append(batch.cpu())
    assert ends == [False, False, False, True]
    torch.testing.assert_close(torch.cat(got), data)
    assert state.active_dataloader is None   # the shard ended its epoch when the loop did


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [1, 2])
def test_accumulation_and_gather_for_metrics_return_the_dataset(tmp_path, nprocs):
    r = _result(_launch(HERE / "accelerate_worker.py", nprocs, tmp_path))
    assert r["processes"] == nprocs and r["device"] == "xla:0"
    assert r["samples"] == [float(i) for i in range(30)]   # each sample once, in order: no padding
    steps = len(r["syncs"])
    assert r["ends"] == [False] * (steps - 1) + [True]
    # gradients sync every 2nd batch and at the last one
    assert r["syncs"] == [(i % 2 == 1) or i == steps - 1 for i in range(steps)]


@pytest.mark.slow
@pytest.mark.parametrize("script,nprocs", [("test_ops.py", 1), ("test_ops.py", 2), ("test_sync.py", 1)])
def test_accelerates_own_scripts(tmp_path, script, nprocs):
    path = SCRIPTS / script
    if not path.exists():
        pytest.skip(f"this accelerate has no {path}")
    out = _launch(path, nprocs, tmp_path)
    assert "Traceback" not in out


@pytest.mark.slow
def test_trainer_predict_and_evaluate_on_two_processes(tmp_path):
    pytest.importorskip("transformers")
    p = subprocess.run([sys.executable, str(HERE / "hf_predict_worker.py"), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=400, cwd=tmp_path,
                       env=_env(CPU_NUM_DEVICES="2"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    r = _result(p.stdout)
    assert r["world"] == 2
    assert r["predictions"] == [float(i) for i in range(101)]
    assert r["eval_loss"] == 0.0
