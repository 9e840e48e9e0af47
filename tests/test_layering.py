"""The engine's layers import one way, and the public modules use only its api.

Every import statement counts, at module level or inside a function. Order
(lowest first): base, runtime, ops, ir, compile, lazy, observe, then api.py.
A module may import its own layer and the layers below; a cycle between
layers is therefore impossible.
"""
import ast
import os

import torch_xla

PKG = os.path.dirname(torch_xla.__file__)
ENGINE = os.path.join(PKG, "engine")
LAYERS = ["base", "runtime", "ops", "ir", "compile", "lazy", "observe", "api"]


def _modules(root):
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                if rel.endswith(".__init__"):
                    rel = rel[: -len(".__init__")]
                yield path, rel


def _imports(path, modname):
    """Absolute names of every torch_xla module `path` imports."""
    tree = ast.parse(open(path).read(), path)
    is_pkg = path.endswith("__init__.py")
    package = modname if is_pkg else modname.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("torch_xla")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("torch_xla"):
                continue
            for a in node.names:
                # `from pkg import mod` imports pkg.mod; `from mod import name` imports mod
                sub = f"{target}.{a.name}"
                out.append((sub if _is_module(sub) else target, node.lineno))
    return out


def _is_module(name):
    path = os.path.join(os.path.dirname(PKG), *name.split("."))
    return os.path.isdir(path) or os.path.exists(path + ".py")


def _layer(mod):
    parts = mod.split(".")
    if parts[:2] != ["torch_xla", "engine"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in LAYERS else "engine-root"


def test_engine_layers_import_downward_only():
    bad = []
    for path, mod in _modules(ENGINE):
        mine = _layer(mod)
        if mine in (None, "engine-root"):
            continue
        for target, line in _imports(path, mod):
            theirs = _layer(target)
            if theirs is None:
                bad.append(f"{mod}:{line} imports {target} (outside the engine)")
            elif theirs == "engine-root":
                bad.append(f"{mod}:{line} imports the engine package itself ({target})")
            elif LAYERS.index(theirs) > LAYERS.index(mine):
                bad.append(f"{mod}:{line} ({mine}) imports {target} ({theirs}): upward")
    assert not bad, "\n".join(bad)


def test_public_modules_use_only_the_engine_api():
    bad = []
    for path, mod in _modules(PKG):
        if mod.startswith("torch_xla.engine"):
            continue
        for target, line in _imports(path, mod):
            if target.startswith("torch_xla.engine") and target not in ("torch_xla.engine.api",):
                bad.append(f"{mod}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path):
    # the check itself: a lazy module importing observe is reported
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from ..observe import debug\n")
    assert _imports(str(f), "torch_xla.engine.lazy.x") == [("torch_xla.engine.observe.debug", 2)]
