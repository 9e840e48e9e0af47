"""Seeing inside the executor: debug analysis, recompilation explanations, hooks.

The executor calls in here at a few points, never per traced op:
  graph(...)            a record of the graph about to compile or run
  before_compile(g)     PT_XLA_DEBUG_LEVEL>=1 "Compilation Analysis:" block,
                        and why it recompiled (a graph from the same user line
                        compiled before: what differs)
  after_compile(g, ...) post-compilation sizes, persistent cache hit/miss
  execute(exe, g)       per-op counters (lazily), level 2 "Execution Analysis:",
                        XLA_SAVE_TENSORS_FILE, torch_xla.compile(full_graph) guard
  failed(...)           XLA_SAVE_HLO_FILE
  barrier(...)          after a full sync: tensor counters, LazyTracing,
                        XLA_METRICS_FILE, the "pt-xla-profiler:" summary

Block formats follow upstream torch_xla's debug_util.cpp output so tools that
grep for them keep working. Source lines per IR node (XLA_IR_DEBUG,
XLA_HLO_DEBUG, PT_XLA_DEBUG_LEVEL>=1) come from `node_class`, which gives
ir.py a Node subclass that records the user's line when a node is made.

This module is imported by ir.py: keep its top-level imports to the stdlib.
"""
import collections
import hashlib
import os
import sys
import threading
import time

from . import metrics as _metrics


def _env_flag(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def _level():
    v = os.environ.get("PT_XLA_DEBUG_LEVEL", "")
    if v.strip():
        try:
            return int(v)
        except ValueError:
            return 0
    return 100 if _env_flag("PT_XLA_DEBUG") else 0


LEVEL = _level()
DEBUG_FILE = os.environ.get("PT_XLA_DEBUG_FILE", "")
try:
    MAX_FRAME = int(os.environ.get("PT_XLA_DEBUG_MAX_FRAME", "8"))
except ValueError:
    MAX_FRAME = 8
SOURCES = LEVEL >= 1 or _env_flag("XLA_IR_DEBUG") or _env_flag("XLA_HLO_DEBUG")
_IS_MASTER = int(os.environ.get("PJRT_LOCAL_PROCESS_RANK", os.environ.get("LOCAL_RANK", "0")) or 0) == 0

allow_execution = True
active = False   # the executor builds a graph record for every execution only when True
_tls = threading.local()


def refresh():
    """Recompute `active` from the switches (env vars, full_graph guard, eager)."""
    global active
    active = (LEVEL >= 2 or not allow_execution
              or bool(os.environ.get("XLA_SAVE_TENSORS_FILE")))


# ---------------------------------------------------------------------------
# where things happen in the user's code

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # .../torch_xla
_ENGINE = os.path.join(_PKG, "engine") + os.sep
_internal_code = {}
_torch_dir = None


def _torch_prefix():
    global _torch_dir
    if _torch_dir is None:
        import torch
        _torch_dir = os.path.dirname(torch.__file__) + os.sep
    return _torch_dir


def _is_internal(code):
    r = _internal_code.get(code)
    if r is None:
        fn = code.co_filename
        r = (fn.startswith(_PKG + os.sep) or fn.startswith(_torch_prefix())
             or fn.startswith("<frozen") or "importlib" in fn and fn.startswith("<"))
        _internal_code[code] = r
    return r


def user_src(depth=2):
    """(function, file, line) of the innermost frame outside torch and torch_xla."""
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if not _is_internal(code):
            return (code.co_name, code.co_filename, f.f_lineno)
        f = f.f_back
    return None


def python_frames(skip_engine=True):
    """Python frames, innermost first, as (function, file, line); torch_xla's
    engine internals are left out (upstream's frames start at its Python API)."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (skip_engine and (fn.startswith(_ENGINE) or fn == __file__)):
            out.append((f.f_code.co_name, fn, f.f_lineno))
        f = f.f_back
    return out


def node_class(base):
    """ir.Node, or a subclass that records the user's line (`src`) when made."""
    if not SOURCES:
        return base

    class SourceNode(base):
        __slots__ = ("src",)

        def __init__(self, kind, entry, operands, h, data=None):
            base.__init__(self, kind, entry, operands, h, data)
            self.src = user_src(2) if kind == 2 else None

    SourceNode.__name__ = "Node"
    SourceNode.__qualname__ = "Node"
    return SourceNode


# ---------------------------------------------------------------------------
# output

def _emit(text, stream="stderr"):
    if DEBUG_FILE:
        with _out_lock:
            with open(DEBUG_FILE, "a") as f:
                f.write(text)
    else:
        s = sys.stderr if stream == "stderr" else sys.stdout
        s.write(text)
        s.flush()


_out_lock = threading.Lock()
_RULE = "=" * 80
_DASH = "-" * 80


def hash_str(h):
    """A 32-hex-digit graph hash for printing (stable for one executable)."""
    return hashlib.md5(str(h).encode()).hexdigest()


# ---------------------------------------------------------------------------
# graph records

class Graph:
    """What the hooks need about one graph; frames are taken when asked for."""
    __slots__ = ("order", "params", "scalars", "values", "key", "reason", "_frames", "_hash", "pcache")

    def __init__(self, order, params, scalars, values, key, reason):
        self.order = order
        self.params = params
        self.scalars = scalars
        self.values = values
        self.key = key
        self.reason = reason
        self._frames = None
        self._hash = None
        self.pcache = None   # (hit, digest) from the persistent cache

    @property
    def frames(self):
        if self._frames is None:
            self._frames = python_frames()
        return self._frames

    @property
    def hash(self):
        if self._hash is None:
            self._hash = hash_str(hash(self.key))
        return self._hash

    @property
    def n_inputs(self):
        return len(self.params) + len({s.entry for s in self.scalars})


def graph(order, params, scalars, values, key, reason):
    return Graph(order, params, scalars, values, key, reason)


# ---------------------------------------------------------------------------
# the cause of a compilation / execution

_SYNC_FUNCS = {("mark_step", "xla_model.py"), ("sync", "__init__.py"), ("sync", "torch_xla.py"),
               ("step", "__init__.py")}


def _is_sync_frame(fr):
    return (fr[0], os.path.basename(fr[1])) in _SYNC_FUNCS and fr[1].startswith(_PKG)


def cause(g):
    frames = g.frames
    if getattr(_tls, "dynamo", False):
        return "dynamo is executing a compiled program"
    if frames and _is_sync_frame(frames[0]):
        caller = None
        for fr in frames[1:]:
            if not _is_sync_frame(fr):
                caller = fr
                break
        if caller is not None:
            fn, file = caller[0], os.path.basename(caller[1])
            if fn in ("next", "__next__") and file == "parallel_loader.py":
                return "mark_step in parallel loader at step end"
            if fn == "__exit__" and file == "profiler.py":
                return "mark_step when exiting a profiler StepTrace region"
            if file == "dynamo_bridge.py":
                return "mark_step when dynamo processing input graphs"
            if caller[1].startswith(_PKG) and file == "__init__.py" and fn in ("__exit__", "wrapper", "_compile"):
                return "torch_xla.compile"
            if caller[1].startswith(_PKG) and file == "__init__.py" and fn == "__enter__":
                return "torch_xla.compile clear the pending graph prior calling the target function"
        return "user mark_step"
    if g.reason == "eager":
        return "eager mode executing an op"
    return "most likely user code trying to access tensor value before mark_step"


def _analysis_block(prefix, g, n_out):
    p = prefix
    lines = ["", f"{p}{_RULE}",
             f"{p}{'Compilation Cause' if p.startswith('Compilation') else 'Execution Cause'}",
             f"{p}  {cause(g)}",
             f"{p}Graph Info: ",
             f"{p}  Graph Hash: {g.hash}",
             f"{p}  Number of Graph Inputs: {g.n_inputs}",
             f"{p}  Number of Graph Outputs: {n_out}",
             f"{p}Python Frame Triggered Execution: "]
    remain = MAX_FRAME
    for fn, file, line in g.frames:
        remain -= 1
        if remain < 0:
            lines.append(f"{p}  ..........")
            break
        lines.append(f"{p}  {fn} ({file}:{line})")
    lines.append(f"{p}{_DASH}")
    lines.append(f"{p}{_RULE}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# hooks called by the executor

def before_compile(g):
    if not allow_execution:
        _unexpected(g)
    note_compile(g)
    if LEVEL >= 1 and _IS_MASTER and not _eager_now():
        _emit(_analysis_block("Compilation Analysis: ", g, len(g.values)))
        expl = _last_explanation.get("text")
        if expl and _last_explanation.get("graph") == g.hash:
            _emit(expl)
    _tls.stage = "compile"
    from . import persistent_cache
    return persistent_cache.snapshot()


def load_compiled(g, inputs, donated):
    """The persistent cache's executable for this graph, or None (then compile)."""
    from . import persistent_cache
    if not persistent_cache.enabled():
        return None
    compiled, digest = persistent_cache.load(g.order, g.params, g.scalars, g.values, inputs, donated)
    g.pcache = (compiled is not None, digest)
    return compiled


def after_compile(g, exe, compiled, cache_before):
    from . import metrics, persistent_cache
    if g.pcache is not None and g.pcache[1] is not None:
        hit, digest = g.pcache
        metrics.counter("PersistentCacheHit" if hit else "PersistentCacheMiss")
        if not hit:
            persistent_cache.store(digest, compiled)
    else:
        persistent_cache.account(cache_before)
    metrics.value_metric("TensorsGraphSize", len(g.order))
    metrics.value_metric("InputOutputAliasCount", len(getattr(exe, "donated", ()) or ()))
    counts = collections.Counter()
    from .graph_dump import op_name
    for n in g.order:
        counts["xla::" + op_name(n.entry).split("::", 1)[1]] += 1
    _op_counts[exe] = tuple(counts.items())
    if len(_op_counts) > 4096:
        _prune_op_counts()
    if LEVEL >= 1 and _IS_MASTER and not _eager_now():
        _emit(_post_compilation(compiled))


def execute(exe, g):
    """Every execution (g is None unless `active`)."""
    _exec_pending[exe] = _exec_pending.get(exe, 0) + 1
    _tls.stage = "run"
    if g is None:
        return
    if not allow_execution:
        _unexpected(g)
    if LEVEL >= 2 and _IS_MASTER and not _eager_now():
        _emit(_analysis_block("Execution Analysis: ", g, len(g.values)))
    if os.environ.get("XLA_SAVE_TENSORS_FILE"):
        from . import graph_dump
        graph_dump.save_graph(g.values, g.frames, hash_str(exe.hash))


def failed(g, stage, exc):
    """A graph failed to compile or run: XLA_SAVE_HLO_FILE. -> note for the error or None."""
    if not os.environ.get("XLA_SAVE_HLO_FILE"):
        return None
    from . import graph_dump
    try:
        path = graph_dump.save_failing_hlo(g.values, stage, exc)
    except Exception:  # noqa: BLE001 - never hide the original error
        return None
    return f"torch_xla: the graph that failed to {stage} was saved to {path} (XLA_SAVE_HLO_FILE)"


_last_barrier = [None]
_metrics_step = [0]


def barrier(reason, created=0, dead=0):
    """After a full sync (mark_step / torch_xla.sync and friends)."""
    from . import metrics
    now = time.perf_counter_ns()
    if created or dead:
        metrics.add_counts((("CreateXlaTensor", created), ("DestroyXlaTensor", dead)))
    if reason == "eager":
        return
    prev = _last_barrier[0]
    if prev is not None and created:
        metrics.metric("LazyTracing", now - prev)
    _last_barrier[0] = time.perf_counter_ns()
    mfile = os.environ.get("XLA_METRICS_FILE")
    if mfile:
        save_metrics(mfile)
    if LEVEL >= 1 and _IS_MASTER:
        rep = perf_report()
        if rep:
            if DEBUG_FILE:
                _emit(rep)
            else:
                sys.stdout.write(rep)
                sys.stdout.flush()


def _unexpected(g):
    text = _analysis_block("Unexpected Execution Analysis: ", g, len(g.values))
    if _IS_MASTER:
        _emit(text)
    where = next(((fn, f, ln) for fn, f, ln in g.frames if not f.startswith(_PKG)), None)
    at = f" at {where[1]}:{where[2]} in {where[0]}" if where else ""
    raise RuntimeError(
        "torch_xla.compile(full_graph=True): unexpected execution inside the compiled function"
        f"{at} ({cause(g)}). Something read a tensor's value (e.g. .item(), print, .cpu(), a "
        "CPU fallback op) before the function returned; move it out of the compiled function.")


def enter_compile(full_graph):
    """torch_xla.compile: trace lazily inside (even in eager mode); with
    full_graph, any execution before the function returns is an error."""
    global allow_execution
    from ..experimental import eager
    saved = (allow_execution, getattr(eager._tls, "lazy", False))
    eager._tls.lazy = True
    if full_graph:
        allow_execution = False
        refresh()
    return saved


def exit_compile(saved):
    global allow_execution
    from ..experimental import eager
    allow_execution, eager._tls.lazy = saved
    refresh()


def _eager_now():
    return getattr(_tls, "eager_op", False)


# ---------------------------------------------------------------------------
# per-op counters (xla::<op>), counted per executed graph, flushed lazily

_op_counts = {}
_exec_pending = {}


def flush_op_counters():
    if not _exec_pending:
        return
    from . import executor, metrics
    with executor._lock:  # executions add to _exec_pending under this lock
        pending = list(_exec_pending.items())
        _exec_pending.clear()
    total = collections.Counter()
    for exe, n in pending:
        for name, c in _op_counts.get(exe, ()):
            total[name] += c * n
    if total:
        metrics.add_counts(total.items())


def drop_pending():
    _exec_pending.clear()


def _prune_op_counts():
    from . import executor
    flush_op_counters()
    live = set(id(e) for e in executor._cache.values())
    for exe in list(_op_counts):
        if id(exe) not in live:
            del _op_counts[exe]


# ---------------------------------------------------------------------------
# post compilation analysis and the pt-xla-profiler summary

def _post_compilation(compiled):
    p = "Post Compilation Analysis: "
    try:
        text = compiled.as_text() or ""
    except Exception:  # noqa: BLE001
        text = ""
    sizes = {}
    try:
        m = compiled.memory_analysis()
        for k in ("generated_code_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
                  "alias_size_in_bytes", "temp_size_in_bytes"):
            v = getattr(m, k, None)
            sizes[k] = f"{v / 1024 / 1024 / 1024:.6f}" if v is not None else "Unknown "
    except Exception:  # noqa: BLE001
        pass

    def gb(k):
        return sizes.get(k, "Unknown ")

    lines = ["", f"Computation hash: {hashlib.md5(text.encode()).hexdigest()}", "",
             f"{p}{_RULE}",
             f"{p}Graph input size: {gb('argument_size_in_bytes')} GB",
             f"{p}Graph output size: {gb('output_size_in_bytes')} GB",
             f"{p}Aliased Input size: {gb('alias_size_in_bytes')} GB",
             f"{p}Intermediate tensor size: {gb('temp_size_in_bytes')} GB",
             f"{p}Compiled program size: {gb('generated_code_size_in_bytes')} GB",
             f"{p}{_DASH}",
             f"{p}{_RULE}"]
    return "\n".join(lines) + "\n"


def perf_report():
    """Upstream's automatic metrics analysis: one 'pt-xla-profiler:' line per symptom."""
    from . import metrics
    flush_op_counters()
    out = []
    steps = metrics.counter_value("MarkStep")

    def frequent(name, threshold, warmup=0):
        n = metrics.metric_total(name)
        if steps > warmup and n and steps and n / steps > threshold:
            out.append(f"pt-xla-profiler: {name} too frequent: {n} counts during {steps} steps")

    def slow(name, limit_ns):
        m = metrics.metrics.get(name)
        if m is None or not m.samples:
            return
        worst = max(v for _, v in m.samples)
        if worst > limit_ns:
            out.append(f"pt-xla-profiler: {name} too slow: longest instance took {metrics.format_time(worst)}. "
                       "Please open a GitHub issue with the graph dump for our team to optimize.")

    frequent("CompileTime", 0.5, warmup=10)
    frequent("TransferFromDeviceTime", 0.5)
    slow("CompileTime", 300e9)
    slow("ExecuteTime", 30e9)
    ops = [n for n, v in sorted(metrics.counters.items())
           if v and n.startswith("aten::") and n != "aten::_local_scalar_dense"]
    if ops:
        out.append("pt-xla-profiler: Op(s) not lowered: " + "".join(f"{n}, " for n in ops)
                   + " Please open a GitHub issue with the above op lowering requests.")
    return "".join(line + "\n" for line in out)


def save_metrics(path=None):
    """Append '[MetricsData; step=N]' and the metrics report (XLA_METRICS_FILE)."""
    from . import metrics
    from .graph_dump import ordinal_path, _append
    path = path or os.environ.get("XLA_METRICS_FILE")
    if not path:
        return
    flush_op_counters()
    step = _metrics_step[0]
    _metrics_step[0] += 1
    text = f"[MetricsData; step={step}]\n{metrics.report()}\n"
    _append(ordinal_path(path), text)


# ---------------------------------------------------------------------------
# why it recompiled

_sites = collections.OrderedDict()    # user site -> list of graph summaries (newest last)
_explanations = []
_last_explanation = {}


class Summary:
    __slots__ = ("hash", "inputs", "uses", "ops", "op_srcs", "seq", "n_scalars", "n_out")


def summarize(g):
    from .graph_dump import op_name
    from . import ir
    s = Summary()
    s.hash = g.hash
    s.inputs = [p.entry for p in g.params]
    first = {}
    ops = collections.Counter()
    srcs = {}
    seq = []
    for n in g.order:
        name = op_name(n.entry)
        ops[name] += 1
        src = getattr(n, "src", None)
        if src is not None:
            srcs.setdefault(name, []).append(src)
        seq.append((name, n.entry.hash, src))
        for k, (c, _) in enumerate(n.operands):
            if c.kind == ir.DATA and id(c) not in first:
                first[id(c)] = (name, src, k)
    s.uses = [first.get(id(p)) for p in g.params]
    s.ops = ops
    s.op_srcs = srcs
    s.seq = seq
    s.n_scalars = len(g.scalars)
    s.n_out = len(g.values)
    return s


def _site_of(g):
    for fn, file, line in g.frames:
        if not file.startswith(_PKG) and not file.startswith(_torch_prefix()):
            return (file, line, fn)
    return None


def note_compile(g):
    """Remember this graph under its user site; explain what changed since the
    last graph compiled from the same site."""
    _last_explanation.clear()
    if _eager_now():
        return
    site = _site_of(g)
    if site is None:
        return
    s = summarize(g)
    prev_list = _sites.get(site)
    if prev_list:
        text = _explain(site, prev_list[-1], s, g)
        _explanations.append(text)
        del _explanations[:-256]
        _last_explanation.update(text=text, graph=g.hash)
        prev_list.append(s)
        del prev_list[:-4]
        _sites.move_to_end(site)
    else:
        _sites[site] = [s]
        if len(_sites) > 512:
            _sites.popitem(last=False)


def explain_recompilations(last=None):
    items = _explanations if last is None else _explanations[-last:]
    return "".join(items)


def _fmt_aval(a):
    from .graph_dump import xla_shape
    shape, dtype = a
    return xla_shape(shape, dtype).split("{")[0]


def _fmt_src(src):
    if not src:
        return ""
    return f" at {src[1]}:{src[2]} in {src[0]}"


def _input_names(g):
    """Names of graph inputs in the user's frames: local tensors, module
    parameters and buffers (model.fc.weight), items of local lists/tuples/dicts."""
    import torch
    want = {id(p): i for i, p in enumerate(g.params)}
    names = {}

    def visit(name, obj, depth=0):
        if isinstance(obj, torch.Tensor):
            v = getattr(obj, "_v", None)
            if v is not None and getattr(obj, "_xb", None) is None and id(v[0]) in want:
                names.setdefault(want[id(v[0])], name)
        elif isinstance(obj, torch.nn.Module) and depth == 0:
            for pn, p in list(obj.named_parameters()) + list(obj.named_buffers()):
                visit(f"{name}.{pn}", p, 1)
        elif isinstance(obj, (list, tuple)) and depth < 2 and len(obj) <= 64:
            for i, x in enumerate(obj):
                visit(f"{name}[{i}]", x, depth + 1)
        elif isinstance(obj, dict) and depth < 2 and len(obj) <= 64:
            for k, x in obj.items():
                visit(f"{name}[{k!r}]", x, depth + 1)

    f = sys._getframe(1)
    seen = 0
    while f is not None and seen < 12:
        if not _is_internal(f.f_code) and f.f_code.co_filename != __file__:
            seen += 1
            for k, v in list(f.f_locals.items()):
                if k.startswith("__"):
                    continue
                try:
                    visit(k, v)
                except Exception:  # noqa: BLE001
                    pass
        f = f.f_back
    return names


def _match_inputs(old, new):
    """Pair old and new inputs (index pairs): by the op and line that first use
    them (in order of appearance), else by position."""
    def keys(s):
        seen = collections.Counter()
        out = []
        for u in s.uses:
            k = tuple(u) if u else None
            seen[k] += 1
            out.append((k, seen[k]))
        return out
    ok, nk = keys(old), keys(new)
    if len(set(ok)) == len(ok) and set(ok) == set(nk):
        where = {k: j for j, k in enumerate(nk)}
        return [(i, where[k]) for i, k in enumerate(ok)]
    return list(zip(range(len(old.inputs)), range(len(new.inputs))))


def _explain(site, old, new, g):
    p = "Recompilation Analysis: "
    lines = ["", f"{p}{_RULE}",
             f"{p}Graph {new.hash} is being compiled; graph {old.hash} was compiled before from the same place:",
             f"{p}  {site[0]}:{site[1]} in {site[2]}",
             f"{p}What changed:"]
    changes = []
    names = None

    def in_name(i):
        nonlocal names
        if names is None:
            try:
                names = _input_names(g)
            except Exception:  # noqa: BLE001
                names = {}
        n = names.get(i)
        return f" '{n}'" if n else ""

    def use_of(u):
        if not u:
            return ""
        return f" (first used by {u[0]}{_fmt_src(u[1])})"

    pairs = _match_inputs(old, new) if len(old.inputs) == len(new.inputs) else None
    if pairs is not None:
        for i, j in pairs:
            a, b = old.inputs[i], new.inputs[j]
            if a != b:
                what = "shape" if a[1] == b[1] else ("dtype" if a[0] == b[0] else "shape and dtype")
                changes.append(f"input {j}{in_name(j)} {what} changed: {_fmt_aval(a)} -> {_fmt_aval(b)}"
                               f"{use_of(new.uses[j])}")
        if not changes and any(i != j for i, j in pairs):
            changes.append("same inputs in a different order (e.g. tensors replaced by an earlier "
                           "step's results); the graph is otherwise the same")
    else:
        changes.append(f"number of graph inputs changed: {len(old.inputs)} -> {len(new.inputs)}")
        oc = collections.Counter(zip(old.inputs, [u[0] if u else None for u in old.uses]))
        nc = collections.Counter(zip(new.inputs, [u[0] if u else None for u in new.uses]))
        for (a, u), c in (nc - oc).items():
            idx = next(i for i, x in enumerate(new.inputs) if x == a)
            changes.append(f"new input{in_name(idx)} {_fmt_aval(a)}" + (f" x{c}" if c > 1 else "")
                           + (f" (first used by {u})" if u else ""))
        for (a, u), c in (oc - nc).items():
            changes.append(f"input {_fmt_aval(a)} no longer used" + (f" x{c}" if c > 1 else "")
                           + (f" (was first used by {u})" if u else ""))
    appeared = new.ops - old.ops
    vanished = old.ops - new.ops
    for name, c in sorted(appeared.items()):
        srcs = new.op_srcs.get(name) or []
        changes.append(f"op {name} appeared" + (f" x{c}" if c > 1 else "") + _fmt_src(srcs[-1] if srcs else None))
    for name, c in sorted(vanished.items()):
        srcs = old.op_srcs.get(name) or []
        changes.append(f"op {name} vanished" + (f" x{c}" if c > 1 else "") + _fmt_src(srcs[-1] if srcs else None))
    if not changes and len(old.seq) == len(new.seq):
        for (n1, h1, s1), (n2, h2, s2) in zip(old.seq, new.seq):
            if h1 != h2:
                changes.append(f"op {n2} has different static arguments or operand shapes{_fmt_src(s2 or s1)}")
                break
    if old.n_scalars != new.n_scalars and not changes:
        changes.append(f"number of Python scalars fed to the graph changed: {old.n_scalars} -> {new.n_scalars}")
    if old.n_out != new.n_out:
        changes.append(f"number of graph outputs (live tensors with pending values) changed: "
                       f"{old.n_out} -> {new.n_out}")
    if not changes:
        changes.append("same inputs and ops; the graph's structure or outputs order differs "
                       "(or it was evicted from the cache: XLA_COMPILATION_CACHE_SIZE)")
    limit = 12
    for c in changes[:limit]:
        lines.append(f"{p}  {c}")
    if len(changes) > limit:
        lines.append(f"{p}  ... and {len(changes) - limit} more")
    lines.append(f"{p}{_RULE}")
    return "\n".join(lines) + "\n"


def _wrap_run_for_hlo_file():
    """XLA_SAVE_HLO_FILE: keep the HLO of a graph whose compilation or execution fails."""
    from . import executor
    orig = executor.run
    if getattr(orig, "_saves_hlo", False):
        return

    def run(root_values, *args, **kwargs):
        _tls.stage = None
        try:
            return orig(root_values, *args, **kwargs)
        except Exception as e:
            stage = getattr(_tls, "stage", None)
            if stage is not None:
                note = failed(Graph([], [], [], list(root_values), (), "error"), stage, e)
                if note:
                    try:
                        e.add_note(note)
                    except AttributeError:  # pragma: no cover - Python < 3.11
                        pass
            raise

    run._saves_hlo = True
    executor.run = run


def at_import():  # noqa: D401
    """Environment switches read once torch_xla is imported."""
    refresh()
    if os.environ.get("XLA_SAVE_HLO_FILE"):
        _wrap_run_for_hlo_file()
    if _env_flag("XLA_HLO_DEBUG"):
        # executed graphs carry 'aten::op(file:line)' scopes in their HLO op_name metadata
        # (seen in --xla_dump_to dumps and profiles)
        from . import executor, graph_dump
        executor.op_scope = graph_dump.op_scope
    from . import persistent_cache
    persistent_cache.from_env()
    if _env_flag("XLA_USE_EAGER_DEBUG_MODE"):
        from ..experimental import eager
        eager.eager_mode(True)


refresh()
_metrics.flushers.append(flush_op_counters)
