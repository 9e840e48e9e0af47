"""The documentation site: it builds without a warning (Sphinx -W), its generated pages are
current (scripts/gen_docs.py --check), and the API reference covers every public module of
upstream torch_xla that this package has. The runnable code blocks are tests/docs/test_blocks.py.
"""
import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
# environment the caller may have set that would change what the build imports
_DROPPED_ENV = ("PJRT_DEVICE", "CPU_NUM_DEVICES", "GPU_NUM_DEVICES", "XLA_PERSISTENT_CACHE_PATH", "XLA_USE_SPMD",
                "XLA_FLAGS")


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


def _slug(heading):
    """GitHub's (and MyST's) anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_readme_links_resolve():
    """The README is read on GitHub, outside the site: each relative link names a file
    of the checkout, and each #anchor a heading of that file."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    bad = []
    for link in links:
        if re.match(r"[a-z]+://", link) or link.startswith("mailto:"):
            continue
        path, _, anchor = link.partition("#")
        target = os.path.join(ROOT, path) if path else os.path.join(ROOT, "README.md")
        if not os.path.exists(target):
            bad.append(f"{link}: no such file")
            continue
        if anchor:
            with open(target) as f:
                slugs = {_slug(m) for m in re.findall(r"^#+\s+(.*)$", f.read(), re.M)}
            if anchor not in slugs:
                bad.append(f"{link}: no heading with anchor #{anchor}")
    assert not bad, bad
