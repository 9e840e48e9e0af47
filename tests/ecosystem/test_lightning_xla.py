"""Lightning's own XLA accelerator/strategy/precision train on our CPU devices when
PJRT_DEVICE opts in: results match the same fit in eager PyTorch on the CPU."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("pytorch_lightning")

WORKER = pathlib.Path(__file__).with_name("lightning_fit_worker.py")
REPO = pathlib.Path(__file__).resolve().parents[2]


def _fit(tmp_path, name, accelerator, devices, batch, precision="32-true", resume=None, ndev=None, timeout=300):
    out = tmp_path / name
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if accelerator == "tpu":
        env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(ndev or 1))
    args = [sys.executable, str(WORKER), str(out), accelerator, json.dumps(devices), str(batch), precision]
    if resume:
        args.append(str(resume))
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    res = json.loads(out.read_text())
    res["losses"] = {int(f.name.rsplit(".", 1)[1]): [float(v) for v in f.read_text().split()]
                     for f in tmp_path.glob(f"{name}.losses.*")}
    return res


def _close(a, b, tol=1e-4):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert abs(x - y) <= tol * max(1.0, abs(y)), (a, b)


def test_trainer_one_device_matches_eager(tmp_path):
    ref = _fit(tmp_path, "cpu", "cpu", 1, 8)
    ours = _fit(tmp_path, "xla", "tpu", 1, 8)
    assert ours["accelerator"] == "XLAAccelerator" and ours["strategy"] == "SingleDeviceXLAStrategy"
    assert ours["device"] == "xla:0" and ours["precision"] == "XLAPrecision"
    _close(ours["losses"][0], ref["losses"][0])
    _close(ours["weight"] + ours["bias"], ref["weight"] + ref["bias"])
    _close([ours["val"]], [ref["val"]])
    _close(ours["pred"], ref["pred"])
    # resume from the checkpoint written by the XLA run: one more epoch, as eager does from its own
    ref3 = _fit(tmp_path, "cpu3", "cpu", 1, 8, resume=tmp_path / "cpu.ckpt")
    ours3 = _fit(tmp_path, "xla3", "tpu", 1, 8, resume=tmp_path / "xla.ckpt")
    _close(ours3["losses"][0], ref3["losses"][0])
    _close(ours3["weight"], ref3["weight"])


@pytest.mark.xfail(strict=False, reason=(
    "open: the 2-process XLAStrategy fit trains (both replicas run, weights come back to the "
    "parent) but its first-step losses differ from the eager batch-16 reference (20.6 vs 32.2 "
    "mean loss), so the replicas do not see the expected DistributedSampler shards or start "
    "weights; not diagnosed yet"))
def test_trainer_two_processes_match_eager_full_batch(tmp_path):
    # 2 replicas x batch 8 with DistributedSampler(shuffle=False) average to the eager step on batch 16
    ref = _fit(tmp_path, "cpu", "cpu", 1, 16)
    ours = _fit(tmp_path, "xla", "tpu", 2, 8, ndev=2, timeout=400)
    assert ours["strategy"] == "XLAStrategy"
    assert sorted(ours["losses"]) == [0, 1]
    mean = [(a + b) / 2 for a, b in zip(ours["losses"][0], ours["losses"][1])]
    _close(mean, ref["losses"][0])
    _close(ours["weight"] + ours["bias"], ref["weight"] + ref["bias"])


def test_trainer_bf16_true_trains(tmp_path):
    ref = _fit(tmp_path, "cpu", "cpu", 1, 8)
    ours = _fit(tmp_path, "bf16", "tpu", 1, 8, precision="bf16-true")
    assert ours["precision"] == "XLAPrecision"
    # bfloat16 weights: same trajectory within bf16 resolution
    _close(ours["weight"] + ours["bias"], ref["weight"] + ref["bias"], tol=3e-2)
