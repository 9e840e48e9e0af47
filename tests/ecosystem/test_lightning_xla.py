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


def _two_replica_reference(epochs=2, replicas=2, batch=8):
    """Eager SGD on what two XLA replicas see together. Lightning always gives the
    training loader a shuffling DistributedSampler (seed 0, set_epoch each epoch),
    so step k of replica r uses its shard's k-th batch; the replicas' averaged
    gradient is the gradient of the mean loss over both batches."""
    import torch
    sys.path.insert(0, str(WORKER.parent))
    try:
        from lightning_fit_worker import data
    finally:
        sys.path.pop(0)
    ds = data(batch).dataset
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=0.05)
    losses = {r: [] for r in range(replicas)}
    for epoch in range(epochs):
        shards = []
        for r in range(replicas):
            sampler = torch.utils.data.DistributedSampler(ds, num_replicas=replicas, rank=r, shuffle=True, seed=0)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        for k in range(0, len(shards[0]), batch):
            opt.zero_grad()
            total = 0
            for r in range(replicas):
                x, y = ds[shards[r][k:k + batch]]
                loss = torch.nn.functional.mse_loss(layer(x), y)
                losses[r].append(loss.item())
                total = total + loss / replicas
            total.backward()
            opt.step()
    return losses, layer.weight.detach().flatten().tolist() + layer.bias.detach().tolist()


def test_trainer_two_processes_match_eager_on_the_same_shards(tmp_path):
    ours = _fit(tmp_path, "xla", "tpu", 2, 8, ndev=2, timeout=400)
    assert ours["strategy"] == "XLAStrategy"
    assert sorted(ours["losses"]) == [0, 1]
    want_losses, want_params = _two_replica_reference()
    for r in (0, 1):
        _close(ours["losses"][r], want_losses[r])
    _close(ours["weight"] + ours["bias"], want_params)


def test_trainer_bf16_true_trains(tmp_path):
    ref = _fit(tmp_path, "cpu", "cpu", 1, 8)
    ours = _fit(tmp_path, "bf16", "tpu", 1, 8, precision="bf16-true")
    assert ours["precision"] == "XLAPrecision"
    # bfloat16 weights: same trajectory within bf16 resolution
    _close(ours["weight"] + ours["bias"], ref["weight"] + ref["bias"], tol=3e-2)


def test_trainer_on_one_chosen_device_of_several(tmp_path):
    # Trainer(accelerator="tpu", devices=[2]) in a process that addresses 4 devices: one
    # process trains on xla:2 with eager's losses (fit, validate, predict, checkpoint)
    ref = _fit(tmp_path, "cpu", "cpu", 1, 8)
    ours = _fit(tmp_path, "xla", "tpu", [2], 8, ndev=4)
    assert ours["strategy"] == "SingleDeviceXLAStrategy" and ours["device"] == "xla:2"
    _close(ours["losses"][0], ref["losses"][0])
    _close(ours["weight"] + ours["bias"], ref["weight"] + ref["bias"])
    _close([ours["val"]], [ref["val"]])
    _close(ours["pred"], ref["pred"])


@pytest.mark.slow
def test_tpu_guide_examples_train(tmp_path):
    # the guide's Trainer lines, one fresh process each: XLAPrecision sets XLA_USE_BF16 after
    # torch_xla is imported, and the storage type is read at the first device use, as upstream
    guide = REPO / "examples" / "lightning_tpu_guide.py"
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2",
               PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    losses = {}
    for name in ("index", "bf16"):
        p = subprocess.run([sys.executable, str(guide), name], capture_output=True, text=True, timeout=300,
                           env=env, cwd=tmp_path)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        line = [ln for ln in p.stdout.splitlines() if ln.startswith(name + ":")]
        assert line, p.stdout[-2000:]
        losses[name] = float(line[0].rsplit(" ", 1)[1])
    assert losses["index"] < 0.5 and losses["bf16"] < 0.5
    assert losses["bf16"] != losses["index"]   # bf16 storage really took effect
