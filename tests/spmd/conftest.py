"""SPMD cases run in a subprocess: the number of host devices (CPU_NUM_DEVICES) is
fixed before JAX starts its CPU backend."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_spmd(code=None, devices=4, script=None, args=(), timeout=300):
    """Run `code` (Python text) or `script` with `devices` CPU devices; -> its stdout
    (the run must exit 0 and print OK)."""
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_USE_SPMD", None)
    cmd = [sys.executable, "-W", "ignore"]
    cmd += [script, *args] if script is not None else ["-c", textwrap.dedent(code)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


@pytest.fixture
def spmd_run():
    return run_spmd
