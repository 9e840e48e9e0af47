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


def run_hosts(script, args=(), hosts=2, devices=2, timeout=240):
    """Run `script` (in tests/spmd) once per host on loopback, as the launcher runs
    one invocation per host: XLA_NUM_HOSTS hosts of `devices` CPU devices each, one
    MASTER_ADDR/MASTER_PORT. Each run must exit 0 within `timeout` seconds; every
    process group is killed at the end, whatever happened. -> their outputs."""
    import socket
    import time
    here = os.path.dirname(os.path.abspath(__file__))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), XLA_NUM_HOSTS=str(hosts),
               MASTER_PORT=str(port), MASTER_ADDR="127.0.0.1", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("XLA_USE_SPMD", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    cmd = [sys.executable, "-W", "ignore", script, *args]
    procs = []
    try:
        for i in range(hosts):
            if i:
                time.sleep(1.0)   # the first host starts the coordinator
            procs.append(subprocess.Popen(cmd, cwd=here, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True))
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                outs.append(f"<timed out after {timeout} s>")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert all(p.returncode == 0 for p in procs), [o[-3000:] for o in outs]
    return outs


@pytest.fixture
def hosts_run():
    return run_hosts
