"""Timing helpers the benchmarks share."""
import json
import os
import re
import statistics
import subprocess
import sys
import time


def median_step(step, sync, steps, warmup=3, reps=3):
    """Seconds per step: `warmup` steps, then `reps` runs of `steps` steps back to
    back with one `sync` each (a training loop never waits between steps); the median."""
    for _ in range(warmup):
        step()
    sync()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        runs.append((time.perf_counter() - t0) / steps)
    return statistics.median(runs)


def run_json(cmd, env=None, timeout=1800, cwd=None):
    """Runs cmd in a fresh process (env: its whole environment, None for ours) and
    returns the last JSON object it printed, or {"error": its last stderr line}."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = out.stderr.strip().splitlines() or ["no output"]
        # the exception's own line, not a note printed after it (JAX's traceback filter)
        raised = [ln for ln in err if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln)]
        return {"error": (raised or err)[-1][:300]}
    return json.loads(lines[-1])


def run_point(script, args, env=None, timeout=1800):
    """Runs `python script *args` with our environment plus `env`; see run_json."""
    return run_json([sys.executable, os.path.abspath(script), *args],
                    dict(os.environ, **(env or {})), timeout)
