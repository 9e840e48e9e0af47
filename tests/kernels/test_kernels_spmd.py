"""flash_attention with partition_spec/mesh and gmm on sharded inputs, on 4 host
devices under SPMD (a subprocess: the device count is fixed before JAX starts)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_flash_attention_and_gmm_under_spmd_on_4_devices():
    env = dict(os.environ)
    env.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "JAX_PLATFORMS": "cpu",
                "PYTHONPATH": ROOT + os.pathsep + env.get("PYTHONPATH", "")})
    for key in ("XLA_USE_SPMD", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    p = subprocess.run([sys.executable, "-W", "ignore", "spmd_kernel_worker.py"], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "ALL OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    assert "{devices=[4,1,1,1]" in p.stdout   # the output stays batch-sharded
