"""The launch entry points that Lightning and accelerate drive: results per
ordinal, the job's processes, and join() that says when the job is done."""
import os
import subprocess
import sys
import textwrap


def test_run_multiprocess_and_spawn_join_false(tmp_path):
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent("""
        import torch, torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla._internal import pjrt

        def square_of_rank():
            return xr.global_ordinal() ** 2

        def work(index):
            t = torch.ones(2, device=torch_xla.device()) * (index + 1)
            return xm.all_reduce(xm.REDUCE_SUM, t).cpu().tolist()

        def bad_payload():
            return xm.rendezvous("tag", "a str, not bytes")

        if __name__ == "__main__":
            print("RESULTS", pjrt.run_multiprocess(square_of_rank))
            try:   # a replica's exception comes back as itself, as upstream's pool
                pjrt.run_multiprocess(bad_payload)
            except TypeError as e:
                print("RAISED", type(e).__name__, type(e.__cause__).__name__)
            job = xmp.spawn(work, nprocs=None, join=False)
            print("NPROCS", len(job.processes))
            while not job.join():
                pass
            print("SUMS", sorted(job.results.items()))
    """))
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RESULTS {0: 0, 1: 1}" in p.stdout
    assert "RAISED TypeError ReplicaFailed" in p.stdout
    assert "NPROCS 2" in p.stdout
    assert "SUMS [(0, [3.0, 3.0]), (1, [3.0, 3.0])]" in p.stdout
