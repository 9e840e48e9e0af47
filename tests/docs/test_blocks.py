"""Runnable code blocks of the documentation: a fenced ```python block right after a line
`<!-- runnable -->` (or `<!-- runnable: NAME=VALUE ... -->` for extra environment variables)
in README.md or a page under docs/ runs in its own process (PJRT_DEVICE=CPU, JAX's CPU
platform, a temporary working folder, this checkout on PYTHONPATH) and must exit 0 within
BLOCK_TIMEOUT seconds. Each block is one test, named page:line (the block's first code line;
a traceback's line numbers are the page's).
"""
import glob
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


