"""Seeing inside the executor: debug analysis, recompilation explanations,
per-op counters, the metrics file. Subscribers of the executor's events only
(`install()` subscribes them); the executor never calls in here.

  compile_begin   PT_XLA_DEBUG_LEVEL>=1 "Compilation Analysis:" block, and why
                  it recompiled (a graph from the same user line compiled
                  before: what differs)
  compiled        graph size metrics, xla::<op> counts of the executable,
                  post-compilation sizes
  executed        per-op counters (flushed lazily), level 2 "Execution
                  Analysis:", XLA_SAVE_TENSORS_FILE
  failed          XLA_SAVE_HLO_FILE (returns a note for the error)
  unexpected      the torch_xla.compile(full_graph=True) analysis block
  barrier         tensor counters, LazyTracing, XLA_METRICS_FILE, the
                  "pt-xla-profiler:" summary

Block formats follow upstream torch_xla's debug_util.cpp output so tools that
grep for them keep working.
"""
import collections
import hashlib
import os
import sys
import threading
import time

from ..base import config, events, frames
from ..base import metrics as _metrics
from ..ir.graph import op_name, xla_shape
from ..ir.node import DATA
from ..lazy import mode
from ..lazy import state as _state
from ..runtime import topology

# PT_XLA_DEBUG_LEVEL is read once, at import (ir/node.py chooses then whether nodes record the
# user's line, which the analyses print); PT_XLA_DEBUG_FILE and PT_XLA_DEBUG_MAX_FRAME at each use
LEVEL = config.debug_level()
_PKG = frames.PKG
_is_internal = frames.is_internal
_torch_prefix = frames.torch_prefix
dynamo_running = threading.local()   # set by a dynamo bridge while it runs a compiled program


# ---------------------------------------------------------------------------
# output

def _is_master():
    """The analyses print in the first process of each host only."""
    return topology.local_rank() == 0


def _emit(text, stream="stderr"):
    path = config.read("PT_XLA_DEBUG_FILE")
    if path:
        with _out_lock:
            with open(path, "a") as f:
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

class Rec:
    """What the analyses need about one graph: the captured ir Graph, why it
    ran, and the user's frames (taken when first asked for, inside the call)."""
    __slots__ = ("g", "reason", "_frames", "_hash")

    def __init__(self, g, reason):
        self.g = g
        self.reason = reason
        self._frames = None
        self._hash = None

    @property
    def frames(self):
        if self._frames is None:
            self._frames = frames.python_frames()
        return self._frames

    @property
    def hash(self):
        if self._hash is None:
            self._hash = hash_str(hash(self.g.key))
        return self._hash

    @property
    def order(self):
        return self.g.order

    @property
    def params(self):
        return self.g.params

    @property
    def scalars(self):
        return self.g.scalars

    @property
    def values(self):
        return self.g.roots

    @property
    def n_inputs(self):
        return self.g.n_inputs


# ---------------------------------------------------------------------------
# the cause of a compilation / execution

_SYNC_FUNCS = {("mark_step", "xla_model.py"), ("sync", "__init__.py"), ("sync", "torch_xla.py"),
               ("step", "__init__.py")}


def _is_sync_frame(fr):
    return (fr[0], os.path.basename(fr[1])) in _SYNC_FUNCS and fr[1].startswith(_PKG)


def cause(g):
    frames = g.frames
    if getattr(dynamo_running, "on", False):
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
    remain = config.read("PT_XLA_DEBUG_MAX_FRAME")
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
# subscribers of the executor's events

_warned_sites = set()


def _warn_large_graph(g):
    """Once per user line: a graph this large is most often several training steps
    traced into one (a missing xm.mark_step()); XLA's compile time grows faster
    than the graph (measured: 2,900 ops 30 s, 5,800 ops 90 s on 2 CPU cores)."""
    limit = config.read("XLA_GRAPH_SIZE_WARNING")
    n = len(g.order)
    if limit <= 0 or n < limit or not _is_master():
        return
    site = _site_of(g)
    if site in _warned_sites:
        return
    _warned_sites.add(site)
    where = f" at {site[0]}:{site[1]} in {site[2]}" if site else ""
    import warnings
    warnings.warn(
        f"torch_xla: compiling a graph of {n} ops{where}. If it spans several training steps, "
        "call xm.mark_step() (or torch_xla.sync()) once per step: one step's graph compiles once and "
        "is reused, while a graph this large compiles slowly. If it is one step of a large model, "
        f"raise XLA_GRAPH_SIZE_WARNING (now {limit}; 0 turns this off).", RuntimeWarning, stacklevel=2)


def _on_compile_begin(graph, reason):
    g = Rec(graph, reason)
    _warn_large_graph(g)
    note_compile(g)
    if LEVEL >= 1 and _is_master() and not _eager_now():
        _emit(_analysis_block("Compilation Analysis: ", g, len(g.values)))
        expl = _last_explanation.get("text")
        if expl and _last_explanation.get("graph") == g.hash:
            _emit(expl)


def _on_compiled(graph, executable, reason):
    metrics = _metrics
    metrics.value_metric("TensorsGraphSize", len(graph.order))
    metrics.value_metric("InputOutputAliasCount", len(executable.donated or ()))
    if LEVEL >= 1 and _is_master() and not _eager_now():
        _emit(_post_compilation(executable.compiled))


def _on_executed(graph, executable, reason):
    save_to = config.read("XLA_SAVE_TENSORS_FILE")
    if not (LEVEL >= 2 or save_to):
        return
    g = Rec(graph, reason)
    if LEVEL >= 2 and _is_master() and not _eager_now():
        _emit(_analysis_block("Execution Analysis: ", g, len(g.values)))
    if save_to:
        from . import graph_dump
        # a compiled Dynamo graph's run is upstream's "[dynamo]" record
        graph_dump.save_graph(graph, g.frames, hash_str(executable.hash),
                              name="dynamo" if reason == "dynamo" else "SyncTensorsGraph",
                              output_shardings=_output_sharding_lines(graph, executable))


def spmd_compiled(executable):
    """The jax executable behind a partitioned (SPMD) one, compile/spmd.py's
    `_Placed`, with the input shardings it was compiled for; (None, None) otherwise."""
    placed = executable.compiled
    shardings = getattr(placed, "shardings", None)
    compiled = getattr(placed, "compiled", None) if shardings is not None else None
    return (compiled, shardings) if compiled is not None else (None, None)


def _output_sharding_lines(graph, executable):
    """'<shape> <sharding>' per output of an SPMD executable (None otherwise)."""
    compiled, _ = spmd_compiled(executable)
    if compiled is None:
        return None
    from ..lazy.handlers import sharding as _sh
    try:
        shardings = list(compiled.output_shardings)
    except Exception:  # noqa: BLE001
        return None
    out = []
    for (node, i), s in zip(graph.roots, shardings):
        shape, dtype = node.entry.out_avals[i] if node.kind != DATA else node.entry
        # Shape::ToString() prints no layout: 'f32[32,2048] {devices=...}'
        out.append(f"{xla_shape(shape, dtype).split('{')[0]} {_sh.format_sharding(s, len(shape))}")
    return out


def _on_failed(graph, stage, error):
    """XLA_SAVE_HLO_FILE: keep the graph that failed; -> a note for the error."""
    if not config.read("XLA_SAVE_HLO_FILE"):
        return None
    from . import graph_dump
    try:
        path = graph_dump.save_failing_hlo(graph, stage, error)
    except Exception:  # noqa: BLE001 - never hide the original error
        return None
    return f"torch_xla: the graph that failed to {stage} was saved to {path} (XLA_SAVE_HLO_FILE)"


def _on_unexpected(graph, reason):
    g = Rec(graph, reason)
    if _is_master():
        _emit(_analysis_block("Unexpected Execution Analysis: ", g, len(g.values)))
    return cause(g)


_last_barrier = [None]
_metrics_step = [0]


_created_counted = [0]


def flush_created():
    """CreateXlaTensor: tensors that became pending since the last count (read
    from the executor's running total when someone looks, never per op)."""
    total = _state.pending_total()
    new = total - _created_counted[0]
    _created_counted[0] = total
    if new > 0:
        _metrics.add_counts((("CreateXlaTensor", new),))


def _on_barrier(reason, created=0, dead=0):
    """After a full sync (mark_step / torch_xla.sync and friends)."""
    metrics = _metrics
    now = time.perf_counter_ns()
    flush_created()
    if dead:
        metrics.add_counts((("DestroyXlaTensor", dead),))
    if reason == "eager":
        return
    prev = _last_barrier[0]
    if prev is not None and created:
        metrics.metric("LazyTracing", now - prev)
    _last_barrier[0] = time.perf_counter_ns()
    mfile = config.read("XLA_METRICS_FILE")
    if mfile:
        save_metrics(mfile)
    if LEVEL >= 1 and _is_master():
        rep = perf_report()
        if rep:
            if config.read("PT_XLA_DEBUG_FILE"):
                _emit(rep)
            else:
                sys.stdout.write(rep)
                sys.stdout.flush()


def _eager_now():
    return mode.in_eager_op()


# ---------------------------------------------------------------------------
# per-op counters (xla::<op>): the nodes traced per op, as upstream counts them
# (a replayed or cached step traces nothing and counts nothing); tracing bumps
# OpInfo.traced, and a read of the metrics moves the counts here

def flush_op_counters():
    from ..ops.op import ALL_INFOS
    counts = collections.Counter()
    for info in ALL_INFOS:
        n = info.traced
        if n:
            info.traced -= n  # not `= 0`: a trace in another thread may have added one
            counts["xla::" + info.name.split(".", 1)[0]] += n
    if counts:
        _metrics.add_counts(counts.items())


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
    metrics = _metrics
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
    metrics = _metrics
    from .graph_dump import ordinal_path, _append
    path = path or config.read("XLA_METRICS_FILE")
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
            if c.kind == DATA and id(c) not in first:
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
    shape, dtype = a
    return xla_shape(shape, dtype).split("{")[0]


def _fmt_src(src):
    if not src:
        return ""
    return f" at {src[1]}:{src[2]} in {src[0]}"


def _input_names(g):
    """Names of graph inputs in the user's frames: local tensors, module
    parameters and buffers (model.fc.weight), items of local lists/tuples/dicts."""
    return {i: nt[0] for i, nt in _input_tensors(g).items()}


def _input_tensors(g):
    """{input index: (name, tensor)} for the graph inputs found in the user's frames."""
    import torch
    want = {id(p): i for i, p in enumerate(g.params)}
    names = {}

    def visit(name, obj, depth=0):
        if isinstance(obj, torch.Tensor):
            if "_lazy" not in obj.__dict__:
                return
            # a base tensor, or an alias of a whole base (a Parameter moved by Module.to)
            base = _state.whole_base(obj)
            if base is None:
                return
            # its current data, or the data it held before this step's update
            for node in (base.value[0], base.prev_data):
                if id(node) in want:
                    names.setdefault(want[id(node)], (name, obj))
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
            for k, v in frames.local_items(f):
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


def install():
    """Subscribe the analyses to the executor's events (the composition root calls this)."""
    events.subscribe("compile_begin", _on_compile_begin)
    events.subscribe("compiled", _on_compiled)
    events.subscribe("executed", _on_executed)
    events.subscribe("failed", _on_failed)
    events.subscribe("unexpected", _on_unexpected)
    events.subscribe("barrier", _on_barrier)
    if flush_op_counters not in _metrics.flushers:
        _metrics.flushers.append(flush_op_counters)
    if flush_created not in _metrics.flushers:
        _created_counted[0] = _state.pending_total()
        _metrics.flushers.append(flush_created)
