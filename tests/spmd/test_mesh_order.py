"""A mesh may list the devices in any order (a reversed mesh, HybridMesh's slice
order, a shuffled one): sharded training over it matches the CPU step for step,
also when the batch is sharded over a second mesh in another order."""
import os

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mesh_order_worker.py")


def _train(spmd_run, *args):
    out = spmd_run(script=WORKER, args=args)
    return dict(line.split(" ", 1) for line in out.splitlines() if line[:4] in ("MESH", "SPEC"))


@pytest.mark.parametrize("order,spec", [
    ("reversed", "{devices=[2,2]3,1,2,0}"),   # spec ('model', 'data') over [[3, 2], [1, 0]]
    ("hybrid", "{devices=[2,2]0,1,2,3}"),     # over [[0, 2], [1, 3]]
])
def test_training_over_a_permuted_mesh_matches_cpu(spmd_run, order, spec):
    out = _train(spmd_run, order)
    assert out["SPEC"] == spec
    if order == "hybrid":
        assert out["MESH"] == "[0, 2, 1, 3]"


def test_batch_over_a_second_mesh_in_another_order(spmd_run):
    out = _train(spmd_run, "shuffled", "mixed")
    assert out["SPEC"] == "{devices=[2,2]2,3,0,1}"
