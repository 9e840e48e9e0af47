"""A mesh may list the devices in any order (a reversed mesh, HybridMesh's slice
order, a shuffled one): sharded training over it matches the CPU step for step,
also when the batch is sharded over a second mesh in another order."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _train(*args):
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_USE_SPMD", None)
    p = subprocess.run([sys.executable, "-W", "ignore", os.path.join(HERE, "mesh_order_worker.py"), *args],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    return dict(line.split(" ", 1) for line in p.stdout.splitlines() if line[:4] in ("MESH", "SPEC"))


@pytest.mark.parametrize("order,spec", [
    ("reversed", "{devices=[2,2]3,1,2,0}"),   # spec ('model', 'data') over [[3, 2], [1, 0]]
    ("hybrid", "{devices=[2,2]0,1,2,3}"),     # over [[0, 2], [1, 3]]
])
def test_training_over_a_permuted_mesh_matches_cpu(order, spec):
    out = _train(order)
    assert out["SPEC"] == spec
    if order == "hybrid":
        assert out["MESH"] == "[0, 2, 1, 3]"


def test_batch_over_a_second_mesh_in_another_order():
    out = _train("shuffled", "mixed")
    assert out["SPEC"] == "{devices=[2,2]2,3,0,1}"
