"""Machine-readable output the benchmarks share: the run's metadata and JSON
writing (the documentation's benchmark page, docs/reference/benchmarks.md, is
rendered from these files by scripts/gen_docs.py)."""
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# environment variables that change what a benchmark measures: recorded in its command line
_ENV_IN_COMMAND = ("UPSTREAM_PYTHON", "PJRT_DEVICE", "JAX_PLATFORMS", "CPU_NUM_DEVICES", "XLA_FLAGS")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        return ""


def git_commit():
    """HEAD of the checkout the benchmark runs from, with "-dirty" when tracked files changed."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def command_line():
    env = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in _ENV_IN_COMMAND if os.environ.get(k))
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    cmd = " ".join(["python", shlex.quote(script)] + [shlex.quote(a) for a in sys.argv[1:]])
    return f"{env} {cmd}" if env else cmd


def metadata(**extra):
    """date, machine (cores, CPU model, platform, load), command line, git commit."""
    return dict({
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "cpu": cpu_model(), "platform": platform.platform(),
                    "load_average": round(os.getloadavg()[0], 2)},
        "command": command_line(),
        "commit": git_commit(),
        "python": platform.python_version(),
    }, **extra)


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"wrote {path}")


def pyplot():
    """matplotlib's pyplot on the Agg backend (imported only when a plot is asked for)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
