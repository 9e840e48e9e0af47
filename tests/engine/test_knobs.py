"""Knobs: every environment variable torch_xla reads is declared once, in
torch_xla/engine/base/config.py, and read through it.

- no module but config.py reads os.environ (the package's source is parsed);
- every name given to config's readers (and to override) is declared;
- undeclared names and malformed values raise;
- override applies to a knob read at each use, refreshes a knob read once whose
  module allows it, and refuses the other knobs read once;
- docs/reference/knobs.md is the page the declarations generate.
"""
import ast
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla
from torch_xla.engine.base import config

PKG = os.path.dirname(torch_xla.__file__)
ROOT = os.path.dirname(PKG)
CONFIG = os.path.join(PKG, "engine", "base", "config.py")
# the variables the task names; the scan below is stricter (every read counts)
PREFIXES = ("XLA_", "PJRT_", "PT_XLA_", "TPU_", "GPU_", "CPU_NUM_DEVICES", "MASTER_")


# ---------------------------------------------------------------------------
# the source scan

def _is_environ(node):
    return ((isinstance(node, ast.Attribute) and node.attr == "environ")
            or (isinstance(node, ast.Name) and node.id == "environ"))


def _name_of(node):
    """A read's variable: its name, 'PREFIX*' for a name built from a constant
    prefix, '<dynamic>' otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return f"{node.values[0].value}*"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _name_of(node.left)
        return left if left.endswith("*") or left == "<dynamic>" else f"{left}*"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _name_of(node.func.value).rstrip("*") + "*"
    return "<dynamic>"


_READS = ("get", "__getitem__", "__contains__")


def env_reads(tree):
    """[(line, variable)] of every environment read in a module: os.environ[...],
    os.environ.get(...), os.getenv(...), `... in os.environ`, and the same through
    `from os import environ, getenv` or `__import__("os")`. Writes (assignment,
    setdefault, update, pop, clear) and snapshots (dict(os.environ)) are not reads."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            out.append((node.lineno, _name_of(node.slice)))
        elif isinstance(node, ast.Call):
            f = node.func
            first = _name_of(node.args[0]) if node.args else "<dynamic>"
            if isinstance(f, ast.Attribute) and f.attr in _READS and _is_environ(f.value):
                out.append((node.lineno, first))
            elif ((isinstance(f, ast.Attribute) and f.attr in ("getenv", "getenvb"))
                  or (isinstance(f, ast.Name) and f.id == "getenv")):
                out.append((node.lineno, first))
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and _is_environ(right):
                    out.append((node.lineno, _name_of(node.left)))
    return sorted(out)


def _sources(*roots):
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    with open(path) as fh:
                        yield path, ast.parse(fh.read(), path)


def test_the_scan_sees_every_kind_of_read():
    sample = textwrap.dedent("""
        import os
        from os import environ, getenv
        a = os.environ["XLA_A"]
        b = os.environ.get("PJRT_B", "x")
        c = os.getenv("PT_XLA_C")
        d = "TPU_D" in os.environ
        e = environ.get("GPU_E")
        f = __import__("os").environ.get("MASTER_F")
        g = os.environ[f"XLA_{x}"]
        h = os.environ.get("XLA_" + x)
        i = getenv("CPU_NUM_DEVICES")
        j = "MASTER_J" not in os.environ
        k = os.environ.get(name)
        os.environ["XLA_WRITE"] = "1"
        os.environ.setdefault("XLA_W2", "1")
        os.environ.update({"XLA_W3": "1"})
        os.environ.pop("XLA_W4", None)
        snapshot = dict(os.environ)
    """)
    names = [n for _, n in env_reads(ast.parse(sample))]
    assert names == ["XLA_A", "PJRT_B", "PT_XLA_C", "TPU_D", "GPU_E", "MASTER_F", "XLA_*", "XLA_*",
                     "CPU_NUM_DEVICES", "MASTER_J", "<dynamic>"]


def test_no_module_but_config_reads_the_environment():
    stray = []
    for path, tree in _sources(PKG):
        if os.path.samefile(path, CONFIG):
            continue
        for line, name in env_reads(tree):
            tag = " (one of the task's prefixes)" if name.startswith(PREFIXES) else ""
            stray.append(f"{os.path.relpath(path, ROOT)}:{line}: {name}{tag}")
    assert not stray, ("read these through torch_xla.engine.base.config (declare the knob in KNOBS, "
                       "then config.read / is_set / raw):\n  " + "\n  ".join(stray))


_READERS = ("read", "is_set", "raw", "knob", "on_override")


def _is_config(node):
    return ((isinstance(node, ast.Name) and node.id in ("config", "_config"))
            or (isinstance(node, ast.Attribute) and node.attr == "config"))


def test_every_name_given_to_config_is_declared():
    wrong = []
    for path, tree in _sources(PKG, os.path.join(ROOT, "tests"), os.path.join(ROOT, "benchmarks")):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and _is_config(node.func.value)):
                continue
            attr = node.func.attr
            names = []
            if attr in _READERS and node.args and isinstance(node.args[0], ast.Constant):
                names.append(node.args[0].value)
            elif attr == "override":
                names += [kw.arg for kw in node.keywords if kw.arg is not None]
            elif attr == "environ_value" and node.args and isinstance(node.args[0], ast.Constant):
                wrong.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: environ_value({node.args[0].value!r}) "
                             "is for names a caller passes; use config.read")
            for n in names:
                if n not in config.KNOBS and not path.endswith("test_knobs.py"):
                    wrong.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {n}")
    assert not wrong, "undeclared knobs:\n  " + "\n  ".join(wrong)


def test_every_declared_knob_is_read_somewhere():
    literals = set()
    for path, tree in _sources(PKG):
        if os.path.samefile(path, CONFIG):   # its functions (debug_level), not its table
            tree = ast.Module([f for f in tree.body if isinstance(f, ast.FunctionDef)], [])
        literals |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    used = {name for name in config.KNOBS if name in literals}
    while True:                              # a fallback is read through the knob it backs
        more = {k.fallback for k in config.KNOBS.values() if k.name in used and k.fallback} - used
        if not more:
            break
        used |= more
    assert set(config.KNOBS) - used == set()


def test_master_port_has_one_default():
    assert config.read("MASTER_PORT") == 12355 or config.is_set("MASTER_PORT")
    assert config.KNOBS["MASTER_PORT"].default == 12355
    for path, tree in _sources(PKG):
        if os.path.samefile(path, CONFIG):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and n.value in (12355, 29500, "12355", "29500"):
                pytest.fail(f"{os.path.relpath(path, ROOT)}:{n.lineno}: a MASTER_PORT default outside config.py")


# ---------------------------------------------------------------------------
# the declarations

def test_declarations_are_typed_and_complete():
    for k in config.KNOBS.values():
        assert k.when in config.WHEN and k.meaning and k.group
        assert k.default is None or k.kind.check(k.default), k
        if k.fallback:
            assert k.fallback in config.KNOBS
    for title, knobs in config.GROUPS:
        assert all(config.KNOBS[k.name] is k for k in knobs)
    assert sum(len(ks) for _, ks in config.GROUPS) == len(config.KNOBS)


def test_typed_values(monkeypatch):
    monkeypatch.setenv("XLA_COMPILATION_CACHE_SIZE", " 16 ")
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "Yes")
    monkeypatch.setenv("XLA_EXIT_WAIT_S", "2.5")
    monkeypatch.setenv("XLA_SAVE_TENSORS_FMT", "HLO")
    monkeypatch.setenv("XLA_JOB_DUMP", "")       # empty: unset
    assert config.read("XLA_COMPILATION_CACHE_SIZE") == 16
    assert config.read("XLA_ALWAYS_ALLREDUCE") is True
    assert config.read("XLA_EXIT_WAIT_S") == 2.5
    assert config.read("XLA_SAVE_TENSORS_FMT") == "hlo"
    assert config.read("XLA_JOB_DUMP") == "" and not config.is_set("XLA_JOB_DUMP")
    monkeypatch.delenv("XLA_COMPILATION_CACHE_SIZE")
    assert config.read("XLA_COMPILATION_CACHE_SIZE") == 2048


def test_a_fallback_is_read_when_the_knob_is_unset(monkeypatch):
    monkeypatch.delenv("XLA_RENDEZVOUS_TIMEOUT", raising=False)
    monkeypatch.setenv("XLA_COLLECTIVE_TIMEOUT", "7")
    from torch_xla.distributed import host_exchange
    assert config.read("XLA_RENDEZVOUS_TIMEOUT") == 7.0 == host_exchange._timeout_s()
    monkeypatch.setenv("XLA_RENDEZVOUS_TIMEOUT", "3")
    assert host_exchange._timeout_s() == 3.0
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("XLA_WORLD_SIZE", "1")
    assert config.read("WORLD_SIZE") == 1


def test_malformed_values_raise_naming_the_knob(monkeypatch):
    monkeypatch.setenv("XLA_COMPILATION_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="XLA_COMPILATION_CACHE_SIZE='lots' is not an integer"):
        config.read("XLA_COMPILATION_CACHE_SIZE")
    monkeypatch.setenv("XLA_SAVE_TENSORS_FMT", "svg")
    with pytest.raises(ValueError, match="XLA_SAVE_TENSORS_FMT='svg' is not one of text, dot, hlo, stablehlo"):
        config.read("XLA_SAVE_TENSORS_FMT")
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "maybe")
    with pytest.raises(ValueError, match="XLA_ALWAYS_ALLREDUCE='maybe' is not a flag"):
        config.read("XLA_ALWAYS_ALLREDUCE")
    with pytest.raises(ValueError, match="XLA_GRAPH_SIZE_WARNING"):
        with config.override(XLA_GRAPH_SIZE_WARNING="big"):
            pass


@pytest.mark.parametrize("reader", [config.read, config.is_set, config.raw, config.knob])
def test_an_undeclared_name_raises_with_the_nearest_one(reader):
    with pytest.raises(config.UnknownKnob, match="'XLA_SCAN_RECOMPTE' is not a declared knob; "
                                                 "did you mean XLA_SCAN_RECOMPUTE?"):
        reader("XLA_SCAN_RECOMPTE")


def test_override_of_an_undeclared_name_raises_and_changes_nothing():
    with pytest.raises(config.UnknownKnob, match="did you mean XLA_GRAPH_SIZE_WARNING"):
        with config.override(XLA_GRAPH_SIZE_WARNING=5, XLA_GRAPH_SIZE_WARNIN=5):
            pass
    assert config._overrides == {}


# ---------------------------------------------------------------------------
# override

def test_override_applies_to_a_knob_read_at_each_use(monkeypatch):
    from torch_xla.distributed import collectives
    import torch_xla.utils.utils as xu
    monkeypatch.delenv("XLA_ALWAYS_ALLREDUCE", raising=False)
    assert not collectives._always()
    with config.override(XLA_ALWAYS_ALLREDUCE=True):
        assert collectives._always()
        assert xu.getenv_as("XLA_ALWAYS_ALLREDUCE", bool) is True   # upstream's helper sees it too
        with config.override(XLA_ALWAYS_ALLREDUCE=None):           # None: unset for the block
            assert not collectives._always()
        assert collectives._always()
    assert not collectives._always()
    assert config._overrides == {}


def test_override_refreshes_a_knob_read_once_at_import(dev):
    from torch_xla.engine.lazy import tracing
    x = torch.ones(3, device=dev)
    assert tracing.NO_SPECIAL_SCALARS is False
    assert "scalar=1" not in torch_xla._XLAC._get_xla_tensors_text([x * 1])
    with config.override(XLA_NO_SPECIAL_SCALARS=1):
        assert tracing.NO_SPECIAL_SCALARS is True
        assert "scalar=1" in torch_xla._XLAC._get_xla_tensors_text([x * 1])
    assert tracing.NO_SPECIAL_SCALARS is False
    assert "scalar=1" not in torch_xla._XLAC._get_xla_tensors_text([x * 1])


def test_override_refreshes_the_index_checks():
    from torch_xla.engine.lazy import index_checks
    assert index_checks.ENABLED is True
    with config.override(XLA_CHECK_INDICES=0):
        assert index_checks.ENABLED is False
    assert index_checks.ENABLED is True


def test_every_refreshable_knob_has_its_hook():
    for k in config.KNOBS.values():
        assert (k.refresh is not None) == k.refreshable, k


@pytest.mark.parametrize("name, value", [("XLA_USE_SPMD", 1), ("XLA_IR_DEBUG", 1), ("PT_XLA_DEBUG_LEVEL", 2),
                                         ("XLA_METRICS_SAMPLES", 8), ("XLA_USE_BF16", 1)])
def test_override_refuses_a_knob_read_once_that_cannot_change(name, value):
    from torch_xla.engine.runtime import topology
    spmd = topology.spmd_enabled()
    with pytest.raises(config.KnobReadOnce, match=f"cannot change {name}: the module that reads it keeps"):
        with config.override(XLA_GRAPH_SIZE_WARNING=5, **{name: value}):
            pass
    assert config._overrides == {} and topology.spmd_enabled() == spmd


def test_a_knob_read_once_still_takes_the_environment_at_import():
    code = ("import torch_xla.runtime as xr; from torch_xla.engine.lazy import index_checks as c; "
            "print(xr.is_spmd(), c.ENABLED)")
    env = dict(os.environ, XLA_USE_SPMD="1", XLA_CHECK_INDICES="off", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "False"]


# ---------------------------------------------------------------------------
# the docs page

def test_the_docs_page_is_current():
    with open(os.path.join(ROOT, "docs", "reference", "knobs.md")) as f:
        page = f.read()
    assert page == config.markdown(), "docs/reference/knobs.md is stale: run python scripts/gen_knob_table.py"
    for name in config.KNOBS:
        assert f"| `{name}` |" in page


def test_the_script_writes_the_page_without_importing_torch():
    code = ("import runpy, sys; sys.argv = ['gen', '--check']; "
            "runpy.run_path('scripts/gen_knob_table.py', run_name='__main__'); "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_import_raises_the_young_gc_threshold_unless_told_not_to_and_never_lowers_it():
    """A traced step keeps its graph alive until the barrier: Python's default first
    threshold (700) would collect (and promote) it many times a step."""
    import gc
    from torch_xla.engine import api
    assert gc.get_threshold()[0] >= 50000   # this process imported torch_xla with the default
    code = "import gc; gc.set_threshold({}); import torch_xla; print(gc.get_threshold()[0])"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for knob, before, after in (("0", 700, 700), ("20000", 700, 20000), ("20000", 90000, 90000)):
        out = subprocess.run([sys.executable, "-c", code.format(before)], env=dict(env, XLA_GC_GEN0_THRESHOLD=knob),
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        assert int(out.stdout.split()[-1]) == after, (knob, before, out.stdout)
    saved = gc.get_threshold()
    try:
        gc.set_threshold(80000, *saved[1:])
        api._raise_gc_threshold(50000)
        assert gc.get_threshold()[0] == 80000
    finally:
        gc.set_threshold(*saved)
