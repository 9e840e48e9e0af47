"""Several XLA devices in one process: a process that no launcher started addresses
every local device (CPU_NUM_DEVICES=4 gives xla:0..xla:3), each op runs on its tensors'
device, copies move between devices, and training on xla:2 matches eager PyTorch."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "multi_device_worker.py"


def _run(*checks, devices=4):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_USE_SPMD", "WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(WORKER), *checks], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def worker():
    return _run()


@pytest.mark.parametrize("check", [
    "check_listing", "check_ops_run_on_their_device", "check_two_devices_in_one_op_is_an_error",
    "check_copies_between_devices", "check_training_on_a_device_matches_eager",
    "check_one_barrier_runs_a_graph_per_device", "check_loader_on_a_device",
    "check_save_and_load_keep_the_device", "check_default_device"])
def test_several_devices_in_one_process(worker, check):
    assert f"ok {check}\n" in worker.stdout, worker.stdout[-2000:] + worker.stderr[-4000:]


def test_one_device_process_still_refuses_xla_1():
    p = subprocess.run([sys.executable, "-c", (
        "import torch, torch_xla\n"
        "assert torch_xla.device_count() == 1\n"
        "try:\n"
        "    torch.zeros(1, device='xla:1')\n"
        "except ValueError as e:\n"
        "    assert 'owns one XLA device' in str(e), e\n"
        "    print('refused')\n")],
        capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "CPU_NUM_DEVICES"},
             "PYTHONPATH": str(HERE.parents[1]), "JAX_PLATFORMS": "cpu"})
    assert "refused" in p.stdout, p.stdout + p.stderr
