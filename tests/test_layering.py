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


# -- inside lazy/ ----------------------------------------------------------------------
# Lowest first. A module imports only modules before it (and what lies below the
# layer); the handlers package comes after its modules, which it imports.
LAZY_ORDER = [
    "mode", "autograd_errors", "exec_time", "state", "host", "serialize", "tensor", "tracing",
    "padding", "index_checks", "views", "device_groups", "donation", "launch", "executor", "eager",
    "transfers", "fallback", "autocast", "dispatch", "subgraph",
    "handlers.random", "handlers.data_dependent", "handlers.batch_norm", "handlers.misc",
    "handlers.optim", "handlers.barrier", "handlers.sharding", "handlers.control_flow",
    "handlers", "replay", "cached_graphs", "device", "",
]
LAZY = os.path.join(ENGINE, "lazy")
LAZY_PKG = "torch_xla.engine.lazy"

# Function-local imports allowed inside lazy/, each with its reason.
LOCAL_IMPORTS_ALLOWED = {
    # Dynamo is imported by torch on demand; the tensor registers with it only then
    ("tensor", "torch._dynamo"): "runs inside torch._dynamo's own import",
    ("tensor", "torch._dynamo.variables.builder"): "runs inside torch._dynamo's own import",
}


def _lazy_name(mod):
    return mod[len(LAZY_PKG) + 1:] if mod != LAZY_PKG else ""


def test_lazy_modules_import_in_their_order():
    bad = []
    for path, mod in _modules(LAZY):
        mine = _lazy_name(mod)
        if mine not in LAZY_ORDER:
            bad.append(f"{mod} is not in LAZY_ORDER (tests/test_layering.py): give it its place")
            continue
        for target, line in _imports(path, mod):
            if not target.startswith(LAZY_PKG + ".") or target == mod:
                continue
            theirs = _lazy_name(target)
            if theirs not in LAZY_ORDER:
                continue   # reported as unlisted above
            if LAZY_ORDER.index(theirs) >= LAZY_ORDER.index(mine):
                bad.append(f"{mod}:{line} imports {target}, which is not below it in LAZY_ORDER")
    assert not bad, "\n".join(bad)


def _local_imports(path):
    """(line, module names) of each import statement inside a function."""
    tree = ast.parse(open(path).read(), path)
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, ast.Import):
                out.append((child.lineno, [a.name for a in child.names]))
            elif in_function and isinstance(child, ast.ImportFrom):
                out.append((child.lineno, ["." * child.level + (child.module or "")]))
            visit(child, inner)
    visit(tree, False)
    return out


def test_no_function_local_imports_inside_lazy():
    bad = []
    for path, mod in _modules(LAZY):
        mine = _lazy_name(mod)
        for line, names in _local_imports(path):
            for name in names:
                if (mine, name) not in LOCAL_IMPORTS_ALLOWED:
                    bad.append(f"{mod}:{line} imports {name} inside a function")
    assert not bad, "\n".join(bad)


def test_the_local_import_checker_sees_one(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\n\ndef f():\n    import json\n    return json\n")
    assert _local_imports(str(f)) == [(4, ["json"])]


# -- the tensor's state has one owner: lazy/state.py -------------------------------------------
STATE_OWNER = "torch_xla.engine.lazy.state"
STATE_FIELDS = {"value", "aval", "gen", "prev_data", "device", "base", "chain"}
OLD_FIELDS = {"_v", "_xb", "_chain", "_gen", "_vgen", "_last_data", "_aval"}
STATE_SOURCES = {"base_of", "whole_base"}   # functions that hand out a tensor's state object


def _is_state_expr(node, names):
    """Whether expression `node` is a tensor's state object: x._lazy, base_of(x),
    whole_base(x), its `.base`, or a name bound to one of these."""
    if isinstance(node, ast.Attribute) and node.attr in ("_lazy", "base"):
        return node.attr == "_lazy" or _is_state_expr(node.value, names)
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        return name in STATE_SOURCES
    return isinstance(node, ast.Name) and node.id in names


def _state_writes(path):
    """(line, what) of each write of a tensor's state outside its owner."""
    tree = ast.parse(open(path).read(), path)
    out = []
    for fn in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        names = set()
        body = list(ast.walk(fn)) if fn is not tree else list(ast.iter_child_nodes(tree))
        for node in body:   # names bound to a state object (in this function)
            if isinstance(node, ast.Assign) and _is_state_expr(node.value, names):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in body:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            stored = []
            for t in targets:
                stored += t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
            for sub in stored:
                if isinstance(sub, ast.Attribute):
                    if sub.attr == "_lazy":
                        out.append((sub.lineno, "assigns a tensor's _lazy"))
                    elif sub.attr in STATE_FIELDS and _is_state_expr(sub.value, names):
                        out.append((sub.lineno, f"writes state field {sub.attr}"))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and node.args:
                key = node.args[1] if len(node.args) > 1 else None
                if isinstance(key, ast.Constant) and key.value == "_lazy":
                    out.append((node.lineno, "setattr of _lazy"))
    return sorted(set(out))


def _old_field_uses(path):
    tree = ast.parse(open(path).read(), path)
    return [(n.lineno, n.attr) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in OLD_FIELDS]


def test_only_the_owner_writes_a_tensors_state():
    bad = []
    for path, mod in _modules(PKG):
        if mod == STATE_OWNER:
            continue
        bad += [f"{mod}:{line} {what}" for line, what in _state_writes(path)]
        bad += [f"{mod}:{line} uses the old tensor field .{attr}" for line, attr in _old_field_uses(path)]
    assert not bad, "\n".join(bad)


def test_the_state_checker_sees_writes(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f(t, u):\n"
                 "    t._lazy = None\n"
                 "    s = t._lazy\n"
                 "    s.value = 1\n"
                 "    base_of(u).gen += 1\n"
                 "    t._lazy.base.aval = 2\n"
                 "    other.value = 3\n")
    assert [line for line, _ in _state_writes(str(f))] == [2, 4, 5, 6]


def test_test_file_names_are_unique():
    """tests/ has no __init__.py files, so pytest imports each test file by its base name:
    two files of one name in different folders fail to collect."""
    here = os.path.dirname(os.path.abspath(__file__))
    seen = {}
    for folder, _, files in os.walk(here):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name), here))
    assert not {k: v for k, v in seen.items() if len(v) > 1}
