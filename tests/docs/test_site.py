"""The documentation site: it builds without a warning, its runnable code blocks run,
its generated pages are current, and the API reference covers every public module of
upstream torch_xla that this package has.

Runnable blocks: a fenced ```python block right after a line `<!-- runnable -->` (or
`<!-- runnable: NAME=VALUE ... -->` for extra environment variables) in README.md or a page
under docs/ runs in its own process (CPU device, a temporary working folder, this checkout
on PYTHONPATH) and must exit 0.
"""
import glob
import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
BLOCK_TIMEOUT = 120

_MARKER = re.compile(r"^\s*<!--\s*runnable(?::(?P<env>[^>]*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
# environment the caller may have set that would change what a block runs on
_DROPPED_ENV = ("PJRT_DEVICE", "CPU_NUM_DEVICES", "GPU_NUM_DEVICES", "XLA_PERSISTENT_CACHE_PATH", "UPSTREAM_PYTHON",
                "XLA_USE_SPMD", "XLA_FLAGS")


def _env_of(text):
    env = {}
    for item in (text or "").split():
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"runnable marker: expected NAME=VALUE, got {item!r}")
        env[name] = value
    return env


def extract_blocks(text, path="<text>"):
    """[(line number of the block's first code line, code, extra env)] for every runnable block;
    ValueError for a marker not followed by a ```python fence or a fence that never closes."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            continue
        env = _env_of(m.group("env"))
        f = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not f or f.group("lang") not in ("python", "py", "python3"):
            raise ValueError(f"{path}:{i + 1}: a runnable marker must be followed by a ```python block")
        fence, indent = f.group("fence"), f.group("indent")
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].strip().startswith(fence[0] * len(fence)) and lines[j].strip().strip(fence[0]) == "":
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
        else:
            raise ValueError(f"{path}:{i + 2}: the runnable block never closes")
        out.append((i + 3, textwrap.dedent("\n".join(body)) + "\n", env))
    return out


def _pages():
    pages = [os.path.join(ROOT, "README.md")]
    for p in sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)):
        rel = os.path.relpath(p, DOCS)
        if rel.split(os.sep)[0] not in ("_build", "data"):
            pages.append(p)
    return [p for p in pages if os.path.exists(p)]


def _all_blocks():
    params = []
    for page in _pages():
        with open(page) as f:
            text = f.read()
        rel = os.path.relpath(page, ROOT)
        try:
            blocks = extract_blocks(text, rel)
        except ValueError as e:
            params.append(pytest.param(rel, 0, None, str(e), id=f"{rel}:malformed"))
            continue
        for line, code, env in blocks:
            params.append(pytest.param(rel, line, code, env, id=f"{rel}:{line}"))
    return params


# ---------------------------------------------------------------- the block extractor itself

def test_extract_blocks_reads_markers_env_and_line_numbers():
    text = "\n".join([
        "# Page",                              # 1
        "<!-- runnable -->",                   # 2
        "```python",                           # 3
        "print(1)",                            # 4
        "```",                                 # 5
        "```python",                           # 6  (not marked: not run)
        "raise SystemExit(1)",                 # 7
        "```",                                 # 8
        "<!-- runnable: CPU_NUM_DEVICES=4 A=b -->",
        "```python",
        "    x = 1",
        "```",
    ])
    blocks = extract_blocks(text)
    assert [(line, env) for line, _, env in blocks] == [(4, {}), (11, {"CPU_NUM_DEVICES": "4", "A": "b"})]
    assert blocks[0][1] == "print(1)\n" and blocks[1][1] == "x = 1\n"


@pytest.mark.parametrize("text", ["<!-- runnable -->\nprint(1)\n", "<!-- runnable -->\n```bash\nls\n```",
                                  "<!-- runnable -->\n```python\nprint(1)\n", "<!-- runnable: X -->\n```python\n```"])
def test_extract_blocks_refuses_malformed_markers(text):
    with pytest.raises(ValueError):
        extract_blocks(text)


# ---------------------------------------------------------------- every runnable block runs

@pytest.mark.slow
@pytest.mark.parametrize("page,line,code,env", _all_blocks())
def test_runnable_block(page, line, code, env, tmp_path):
    if code is None:
        pytest.fail(env)    # a malformed marker: env holds the message
    script = tmp_path / f"block_{os.path.basename(page).replace('.', '_')}_{line}.py"
    script.write_text("\n" * (line - 1) + code)   # a traceback's line numbers are the page's
    run_env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    run_env.update(PJRT_DEVICE="CPU", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                          if p]))
    run_env.update(env)
    try:
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=run_env, capture_output=True, text=True,
                             timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{page}:{line}: the block ran over {BLOCK_TIMEOUT} s")
    assert out.returncode == 0, (f"{page}:{line}: the block exited {out.returncode}\n--- code\n{code}"
                                 f"--- stdout\n{out.stdout[-3000:]}\n--- stderr\n{out.stderr[-3000:]}")


# ---------------------------------------------------------------- generated pages are current

def _gen_docs():
    spec = importlib.util.spec_from_file_location("_gen_docs", os.path.join(ROOT, "scripts", "gen_docs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_pages_are_current():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_gen_docs_check_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    g = _gen_docs()
    page = tmp_path / "knobs.md"
    page.write_text("stale\n")
    monkeypatch.setitem(g.PAGES, "knobs", str(page))
    assert g.check() == 1
    assert "knobs.md is stale" in capsys.readouterr().out


def test_compatibility_page_from_a_run(tmp_path, monkeypatch):
    """Totals, per-file figures, hand reasons by glob, and the log's first error line as the fallback."""
    g = _gen_docs()
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "results.tsv").write_text("# file\ttest id\toutcome\tupstream outcome\n"
                                     "a.py\tT.test_ok\tpass\tpass\n"
                                     "a.py\tT.test_bad\tfail\tpass\n"
                                     "a.py\tT.test_extra\tpass\tskip\n"
                                     "sub/b.py\tU.test_x\terror\tpass\n"
                                     "sub/b.py\tU.test_y\tfail\tfail\n")
    (run / "summary.txt").write_text("a.py      1 of 2 upstream-passing cases pass  (fail 1, pass 2; rc=1, 5s, 1 more pass here)\n"
                                     "sub/b.py  0 of 1 upstream-passing cases pass  (error 1, fail 1; rc=1, 7s)\n"
                                     "1 of 3 upstream-passing cases pass\n")
    (run / "logs" / "sub__b.py.log").write_text(
        "U.test_x ... ERROR\n\n" + "=" * 70 + "\nERROR: test_x (__main__.U.test_x)\n" + "-" * 70 +
        "\nTraceback (most recent call last):\n  File \"b.py\", line 3, in test_x\n    boom()\n"
        "ValueError: boom went off\n\n" + "-" * 70 + "\nRan 2 tests in 0.1s\n\nFAILED (errors=1)\n")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("RESULTS_TSV", "SUMMARY_TXT", "RUN_TXT", "ERRORS_TSV"):
        monkeypatch.setattr(g, name, str(data / os.path.basename(getattr(g, name))))
    reasons = data / "reasons.tsv"
    reasons.write_text("# comment\na.py\tT.test_b*\ta reason written by hand\n")
    monkeypatch.setattr(g, "REASONS_TSV", str(reasons))
    g.import_upstream_run(str(run), {"date": "2026-01-02", "commit": "abc1234", "machine": "", "command": "cmd"})
    page = g.render_compatibility()
    assert "| upstream passes | 3 |" in page and "| of those, pass here | 1 (33.3%) |" in page, page
    assert "| more pass here (upstream skips or fails them) | 1 |" in page, page
    assert "| `a.py` | 2 | 1 | 50.0% | 1 | 5 s |" in page, page
    assert "| `a.py` | T.test_bad | fail | a reason written by hand |" in page, page
    assert "| `sub/b.py` | U.test_x | error | not yet analysed; the log says: `ValueError: boom went off` |" in page, page
    assert "2026-01-02" in page and "`abc1234`" in page, page


# ---------------------------------------------------------------- the API reference

def _automodules():
    found = {}
    for p in glob.glob(os.path.join(DOCS, "reference", "api", "*.md")):
        with open(p) as f:
            for m in re.finditer(r"^\s*(?:\.\. automodule::|```\{automodule\})\s*(\S+)\s*$", f.read(), re.M):
                found.setdefault(m.group(1), os.path.relpath(p, ROOT))
    return found


def _ours(module):
    base = os.path.join(ROOT, *module.split("."))
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


def test_api_reference_covers_upstreams_public_modules():
    with open(os.path.join(DOCS, "data", "upstream_public_modules.txt")) as f:
        upstream = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert len(upstream) > 50 and "torch_xla.core.xla_model" in upstream
    documented = _automodules()
    missing = [m for m in upstream if _ours(m) and m not in documented]
    assert not missing, f"public modules of upstream this package has, with no automodule under docs/reference/api/: " \
                        f"{missing}"
    absent = [m for m in documented if not _ours(m)]
    assert not absent, f"automodule names a module this package does not have: {absent}"


# ---------------------------------------------------------------- the site builds

@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    for mod in ("sphinx", "myst_parser"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install -e '.[docs]')")
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(JAX_PLATFORMS="cpu", PJRT_DEVICE="CPU",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-E",
                          "-d", str(tmp_path / "doctrees"), DOCS, str(tmp_path / "html")],
                         capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert out.returncode == 0, f"sphinx-build failed:\n{out.stderr[-6000:]}\n{out.stdout[-2000:]}"
    for page in ("index.html", "reference/api/core.html", "reference/compatibility.html", "reference/benchmarks.html"):
        assert (tmp_path / "html" / page).exists(), page
