#!/usr/bin/env python3
"""Run upstream PyTorch/XLA's own test files against this package.

Usage:
    UPSTREAM_XLA=/path/to/pytorch-xla python scripts/run_upstream_tests.py [FILTER ...]
        [--timeout SECONDS] [--out DIR] [-k PATTERN] [--installed]
        [--files-tsv PATH] [--baseline-tsv PATH]

`UPSTREAM_XLA` names a checkout of pytorch/xla (its `test/` folder is used; a
path that is itself the `test/` folder works too). Without it the script says
so and exits 0 ("skipped").

Which files run, and how, comes from `upstream-suite-files.tsv` (default:
`shared/baselines/` beside or above this checkout, or `/work/shared/baselines`):
every row is run from `$UPSTREAM_XLA/test` with the row's environment (`@TMP@` is
a fresh folder per row, `PJRT_DEVICE=CPU` unless already set) and what upstream's
`run_tests.sh` exports (`TORCH_TEST_DEVICES`, `PYTORCH_TEST_WITH_SLOW`) as either
`python FILE ARGS` (mode `main`/`script`) or `python -m unittest -v MODULE`
(mode `unittest`).

FILTER arguments select rows whose name contains one of them (`test_ops.py`,
`test_metrics.py@metrics_file`, `spmd/`). `-k PATTERN` (repeatable) is handed to
unittest to run a subset of a file's cases. `--timeout` bounds each file
(default 900 s); a file that runs out gets `timeout` for the cases it had not
finished.

Each case's outcome is read from unittest's verbose output (the runner forces
verbosity 2 through a `sitecustomize` shim put first on PYTHONPATH, so files that
build their own `TextTestRunner` report per case too; absltest's `[ RUN ]` /
`[  FAILED  ]` lines are read as well). Script-mode rows have one case, `main`,
which passes when the script exits 0. This checkout is put on PYTHONPATH ahead
of any installed torch_xla unless `--installed` is given.

Writes to `--out` (default `upstream-results/`): `results.tsv` (file, test id,
our outcome, upstream's outcome), `logs/<row>.log` (the raw output) and
`summary.txt`, which gives per file and in all "N of M upstream-passing cases
pass", compared with `upstream-suite-cpu.tsv`.

Outcomes: pass, fail, error, skip, xfail, timeout (the file ran out of time
first), crash (the process died before reporting the case), missing (the file
finished without reporting it).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SHIM = """\
# Written by run_upstream_tests.py: every unittest runner reports each case.
import unittest as _ut
_orig_init = _ut.TextTestRunner.__init__
def _verbose_init(self, *args, **kwargs):
    _orig_init(self, *args, **kwargs)
    self.verbosity = max(self.verbosity or 0, 2)
_ut.TextTestRunner.__init__ = _verbose_init
"""

_RANK = {"pass": 0, "xfail": 0, "skip": 1, "fail": 2, "error": 3}
_STATUS = re.compile(r"^(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
# "name[ extra] (qualified.name)[ [subtest msg]]", as unittest's getDescription writes it
_DESC = re.compile(r"^(?P<name>\w+)(?P<extra>(?: \(.*?\))*?) \((?P<qual>[\w.]+)\)(?P<sub>(?: \[.*\])*)$")
_ABSL = re.compile(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (.+?)\s*$")
_SUMMARY = re.compile(r"^(FAIL|ERROR): (.+)$")


def _find_baselines(name):
    for base in (os.path.join(REPO, "shared", "baselines"),
                 os.path.join(os.path.dirname(REPO), "shared", "baselines"),
                 "/work/shared/baselines"):
        p = os.path.join(base, name)
        if os.path.exists(p):
            return p
    return None


def read_files_tsv(path):
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name, mode, env, cmd = line.rstrip("\n").split("\t")
            rows.append((name, mode, env, cmd))
    return rows


def read_baseline(path):
    base = collections.OrderedDict()
    if not path or not os.path.exists(path):
        return base
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            file, tid, outcome = line.rstrip("\n").split("\t")[:3]
            base.setdefault(file, collections.OrderedDict())[tid] = outcome
    return base


def _status_outcome(s):
    s = s.strip()
    if s == "ok":
        return "pass"
    if s == "FAIL" or s == "unexpected success":
        return "fail"
    if s == "ERROR":
        return "error"
    if s.startswith("skipped"):
        return "skip"
    if s == "expected failure":
        return "xfail"
    return None


def _desc_id(text):
    """Test id (`Class.method[ params]`, module kept unless it is __main__) of
    a unittest description, or None."""
    m = _DESC.match(text.strip())
    if not m:
        return None
    name, extra, qual = m.group("name"), m.group("extra"), m.group("qual")
    if qual.endswith("." + name):
        tid = qual
    else:  # absltest: "test_x0 (params) (__main__.Class)"
        tid = qual + "." + name
    if tid.startswith("__main__."):
        tid = tid[len("__main__."):]
    return tid + extra


def parse_verbose(text):
    """Outcomes per test id from unittest/absltest verbose output, plus the
    classes whose setUpClass failed and whether the run reached its summary."""
    out = collections.OrderedDict()
    class_errors = []
    finished = False
    pending = None
    last_desc = None

    def put(tid, outcome):
        old = out.get(tid)
        if old is None or _RANK[outcome] > _RANK[old]:
            out[tid] = outcome

    lines = text.splitlines()
    in_summary_header = False
    for i, line in enumerate(lines):
        if re.match(r"^Ran \d+ tests? in ", line):
            finished = True
        m = _ABSL.match(line)
        if m:
            kind, tid = m.groups()
            if kind == "RUN":
                pending = tid
                out.setdefault(tid, None)
            else:
                put(tid, {"OK": "pass", "FAILED": "fail", "SKIPPED": "skip"}[kind])
                pending = None
            continue
        m = _SUMMARY.match(line)
        if m and (i == 0 or lines[i - 1].startswith("=====")):
            kind, desc = m.groups()
            cls = re.match(r"^(setUpClass|tearDownClass) \(([\w.]+)\)$", desc)
            if cls:
                class_errors.append(cls.group(2).split(".")[-1])
                continue
            if re.match(r"^(setUpModule|tearDownModule) ", desc):
                class_errors.append("*")
                continue
            tid = _desc_id(desc)
            if tid:
                put(tid, "fail" if kind == "FAIL" else "error")
            continue
        if " ... " in line or line.endswith(" ..."):
            left, _, right = line.partition(" ...")
            right = right.strip()
            tid = _desc_id(left)
            sub = left.startswith("  ")
            if tid is None:
                tid = last_desc
            if tid is None:
                continue
            if not sub:
                out.setdefault(tid, None)
            outcome = _status_outcome(right)
            if outcome is None:
                pending = tid
            else:
                if sub and outcome == "pass":
                    continue
                put(tid, outcome)
                pending = None
            continue
        tid = _desc_id(line)
        if tid is not None and not line.startswith(" "):
            last_desc = tid
            continue
        if pending is not None and _STATUS.match(line.strip()):
            put(pending, _status_outcome(line))
            pending = None
    return out, class_errors, finished


def _match_id(tid, expected):
    """Our id as upstream's baseline spells it. torch's device-generic tests name
    their classes after the device type's dispatch key: `TestFooXLA` upstream,
    `TestFooPRIVATEUSE1` here (the xla device is PyTorch's PrivateUse1 key)."""
    for cand in (tid, tid.replace("PRIVATEUSE1.", "XLA.")):
        if cand in expected:
            return cand
        for e in expected:
            if e.endswith("." + cand):
                return e
    return tid.replace("PRIVATEUSE1.", "XLA.")


TORCHVISION_SHIM = {
    "__init__.py": '"""Import-only torchvision for upstream scripts run with --fake_data."""\n'
                   'from . import datasets, transforms  # noqa: F401\n',
    "datasets.py": 'def __getattr__(name):\n'
                   '    raise ImportError("torchvision is not installed (import-only shim): datasets.%s" % name)\n',
    "transforms.py": 'def __getattr__(name):\n'
                     '    raise ImportError("torchvision is not installed (import-only shim): transforms.%s" % name)\n',
}


def _write_torchvision_shim(shim_dir):
    """Upstream's MNIST trainers import torchvision at the top even with --fake_data;
    torchvision does not install beside every torch, so give them a package that
    imports and fails only when a dataset or transform is actually used."""
    try:
        import importlib.util
        if importlib.util.find_spec("torchvision") is not None:
            return
    except (ImportError, ValueError):
        pass
    pkg = os.path.join(shim_dir, "torchvision")
    os.makedirs(pkg, exist_ok=True)
    for name, text in TORCHVISION_SHIM.items():
        with open(os.path.join(pkg, name), "w") as f:
            f.write(text)


def run_row(row, test_dir, out_dir, timeout, kfilters, use_checkout, shim_dir):
    name, mode, env_text, cmd = row
    tmp = tempfile.mkdtemp(prefix="upstream-")
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")
    # what upstream's test/run_tests.sh exports: its device-type test base (the
    # *XLA classes of instantiate_device_type_tests) and the slow cases
    env.setdefault("TORCH_TEST_DEVICES", os.path.join(test_dir, "pytorch_test_base.py"))
    env.setdefault("PYTORCH_TEST_WITH_SLOW", "1")
    env.setdefault("XLA_DUMP_FATAL_STACK", "1")
    if env_text != "-":
        for kv in env_text.split():
            k, _, v = kv.partition("=")
            env[k] = v.replace("@TMP@", tmp)
    paths = [shim_dir] + ([REPO] if use_checkout else [])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    args = cmd.replace("@TMP@", tmp).split()
    if mode == "unittest":
        argv = [sys.executable, "-m", "unittest", "-v"] + args
    else:
        argv = [sys.executable] + args
    if mode != "script":
        for k in kfilters:
            argv += ["-k", k]
    log_path = os.path.join(out_dir, "logs", name.replace("/", "__") + ".log")
    start = time.time()
    timed_out = False
    with open(log_path, "w") as log:
        log.write("$ cd %s && %s %s\n" % (test_dir, env_text, " ".join(argv)))
        log.flush()
        proc = subprocess.Popen(argv, cwd=test_dir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass
            rc = proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    with open(log_path, errors="replace") as f:
        text = f.read()
    return rc, timed_out, time.time() - start, text


def outcomes_for(row, rc, timed_out, text, expected):
    name, mode = row[0], row[1]
    if mode == "script":
        if timed_out:
            return {"main": "timeout"}
        return {"main": "pass" if rc == 0 else "fail"}
    parsed, class_errors, finished = parse_verbose(text)
    res = collections.OrderedDict()
    for tid, outcome in parsed.items():
        res[_match_id(tid, expected)] = outcome
    for tid in expected:
        if res.get(tid) is None:
            cls = tid.split(".")[-2] if "." in tid else ""
            if "*" in class_errors or cls in class_errors:
                res[tid] = "error"
    died = timed_out or (not finished)
    for tid in list(expected) + list(res):
        if res.get(tid) is None:
            if timed_out:
                res[tid] = "timeout"
            elif died:
                res[tid] = "crash"
            else:
                res[tid] = "missing"
    return res


def _read_log(folder, name):
    path = os.path.join(folder, "logs", name.replace("/", "__") + ".log")
    if not os.path.exists(path):
        return None, False, 0.0, ""
    with open(path, errors="replace") as f:
        text = f.read()
    finished = re.search(r"^(OK|FAILED)( \(.*\))?$", text, re.M) is not None
    return (0 if finished else None), False, 0.0, text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("filters", nargs="*", help="run rows whose name contains one of these")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per file (default 900)")
    ap.add_argument("--out", default="upstream-results", help="output folder")
    ap.add_argument("-k", dest="k", action="append", default=[], help="unittest -k pattern")
    ap.add_argument("--installed", action="store_true",
                    help="test the installed torch_xla, not this checkout")
    ap.add_argument("--from-logs", default=None, metavar="DIR",
                    help="re-read the logs of an earlier run (DIR/logs) instead of running")
    ap.add_argument("--files-tsv", default=None)
    ap.add_argument("--baseline-tsv", default=None)
    opts = ap.parse_args(argv)

    up = os.environ.get("UPSTREAM_XLA")
    if not up:
        print("run_upstream_tests: UPSTREAM_XLA is not set (a pytorch/xla checkout); skipped")
        return 0
    test_dir = up if os.path.basename(os.path.normpath(up)) == "test" else os.path.join(up, "test")
    if not os.path.isdir(test_dir):
        print("run_upstream_tests: %s has no test/ folder; skipped" % up)
        return 0
    files_tsv = opts.files_tsv or _find_baselines("upstream-suite-files.tsv")
    if not files_tsv:
        print("run_upstream_tests: upstream-suite-files.tsv not found (give --files-tsv); skipped")
        return 0
    baseline = read_baseline(opts.baseline_tsv or _find_baselines("upstream-suite-cpu.tsv"))
    rows = read_files_tsv(files_tsv)
    if opts.filters:
        rows = [r for r in rows if any(f in r[0] for f in opts.filters)]
    if not rows:
        print("run_upstream_tests: no file matches %s" % " ".join(opts.filters))
        return 1

    os.makedirs(os.path.join(opts.out, "logs"), exist_ok=True)
    shim_dir = tempfile.mkdtemp(prefix="upstream-shim-")
    with open(os.path.join(shim_dir, "sitecustomize.py"), "w") as f:
        f.write(SHIM)
    _write_torchvision_shim(shim_dir)

    all_results = []
    summary = []
    tot_ok = tot_up = 0
    try:
        for row in rows:
            name = row[0]
            expected = baseline.get(name, collections.OrderedDict())
            print("== %s ..." % name, flush=True)
            if opts.from_logs:
                rc, timed_out, secs, text = _read_log(opts.from_logs, name)
            else:
                rc, timed_out, secs, text = run_row(row, test_dir, opts.out, opts.timeout, opts.k,
                                                    not opts.installed, shim_dir)
            if opts.k:  # a subset: compare only the cases that ran
                res = outcomes_for(row, rc, timed_out, text, collections.OrderedDict())
                expected = collections.OrderedDict((t, o) for t, o in expected.items() if t in res)
            else:
                res = outcomes_for(row, rc, timed_out, text, expected)
            up_pass = [t for t, o in expected.items() if o == "pass"]
            ok = sum(1 for t in up_pass if res.get(t) == "pass")
            extra = sum(1 for t, o in res.items() if o == "pass" and expected.get(t) not in ("pass",))
            counts = collections.Counter(res.values())
            tot_ok += ok
            tot_up += len(up_pass)
            line = "%-52s %4d of %4d upstream-passing cases pass  (%s; rc=%s%s, %.0fs%s)" % (
                name, ok, len(up_pass),
                ", ".join("%s %d" % kv for kv in sorted(counts.items())),
                rc, " TIMEOUT" if timed_out else "", secs,
                ", %d more pass here" % extra if extra else "")
            print(line, flush=True)
            summary.append(line)
            for t, o in res.items():
                all_results.append((name, t, o, expected.get(t, "-")))
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)
    total = "%d of %d upstream-passing cases pass" % (tot_ok, tot_up)
    summary.append(total)
    print(total)
    with open(os.path.join(opts.out, "results.tsv"), "w") as f:
        f.write("# file\ttest id\toutcome\tupstream outcome\n")
        for r in all_results:
            f.write("\t".join(r) + "\n")
    with open(os.path.join(opts.out, "summary.txt"), "w") as f:
        f.write("\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
