"""Graph dumps: IR text and DOT, HLO and StableHLO of pending tensors.

`_get_xla_tensors_text` prints the IR the way upstream does
(`IR { %0 = f32[2,2]{1,0} xla::device_data(), ... }`); HLO and StableHLO
come from lowering the same replay function the executor compiles
(`jax.jit(fn).lower(...)`), fed abstract inputs so nothing runs and no
buffer is touched. XLA_SAVE_TENSORS_FILE / XLA_SAVE_TENSORS_FMT append one
record per executed graph; XLA_SAVE_HLO_FILE keeps the graph that failed to
compile or run. With XLA_IR_DEBUG / XLA_HLO_DEBUG, nodes carry the user's
line (ir/node.py): `location=` in the IR, and a named
scope `aten::op(file:line)` in the HLO op_name metadata.
"""
import collections
import os
import re
import threading

from ..base import config
from ..ir import node as ir
from ..ir.graph import Graph, op_name, op_scope, xla_shape  # noqa: F401  (re-exported)
from ..lazy.executor import pending_roots as roots_of  # noqa: F401
from ..ops.context import LoweringContext

_lock = threading.Lock()


def env_flag(name):
    return config.read(name)


def ordinal_path(path):
    """`path.<ordinal>` when the job has more than one process (upstream's GetEnvOrdinalPath)."""
    if not path or path in ("STDOUT", "STDERR"):
        return path
    from ..runtime import topology
    if topology.world_size() > 1:
        return f"{path}.{topology.rank()}"
    return path


def node_location(node):
    src = getattr(node, "src", None)
    if src is None:
        return None
    fn, file, line = src
    return f"{fn}@{os.path.basename(file)}:{line}"


# ---------------------------------------------------------------------------
# which values to dump

def _graph(values):
    return values if isinstance(values, Graph) else Graph.capture(values)


def _n_outputs(node):
    if node.kind == ir.OP:
        return len(node.entry.out_avals)
    return 1


def _node_shape(node, index=0):
    if node.kind == ir.OP:
        shape, dtype = node.entry.out_avals[index]
        return xla_shape(shape, dtype)
    if node.kind == ir.DATA:
        shape, dtype = node.entry
        return xla_shape(shape, dtype)
    return xla_shape((), node.entry)


def _node_shape_text(node):
    if node.kind == ir.OP and len(node.entry.out_avals) > 1:
        return "(" + ", ".join(_node_shape(node, i) for i in range(len(node.entry.out_avals))) + ")"
    return _node_shape(node)


def _static_tags(entry):
    """(name, value, is_scalar) for an op's static (non-tensor) arguments;
    is_scalar: a number passed where the schema takes a `Scalar`, which upstream's
    IR holds as a prim::Constant operand."""
    from ..ops.op import Slot
    tags = []
    info = entry.info
    schema = None
    if info is not None and info.func is not None:
        try:
            schema = info.func._schema.arguments
        except Exception:  # noqa: BLE001
            schema = None

    def has_slot(x):
        if type(x) is Slot:
            return True
        if isinstance(x, (list, tuple)):
            return any(has_slot(y) for y in x)
        return False

    def scalar(i, a):
        return (schema is not None and i < len(schema) and str(schema[i].type) == "number"
                and type(a) in (int, float, bool))

    for i, a in enumerate(entry.template):
        if has_slot(a) or a is None:
            continue
        name = schema[i].name if schema is not None and i < len(schema) else f"arg{i}"
        tags.append((name, _fmt_static(a), scalar(i, a)))
    by_name = {arg.name: i for i, arg in enumerate(schema or ())}
    for k, a in (entry.kwtemplate or {}).items():
        if has_slot(a) or a is None:
            continue
        tags.append((k, _fmt_static(a), k in by_name and scalar(by_name[k], a)))
    return tags


def _fmt_static(a):
    if isinstance(a, (list, tuple)):
        return "(" + ", ".join(_fmt_static(x) for x in a) + ")"
    return str(a).replace("torch.", "")


def _device_name():
    try:
        from ..runtime.platform import jax_device
        d = jax_device()
        return f"{d.platform.upper()}:{d.id}"
    except Exception:  # noqa: BLE001
        return "CPU:0"


# ---------------------------------------------------------------------------
# IR text and DOT

def _numbered(values):
    """(nodes in order, node id -> number, node id -> first root index) of a graph."""
    g = _graph(values)
    order = g.nodes
    ids = {id(n): i for i, n in enumerate(order)}
    roots = {}
    for i, v in enumerate(g.roots):
        roots.setdefault(id(v[0]), i)
    return order, ids, roots


def to_text(values):
    order, _, roots = _numbered(values)
    dev = _device_name()
    lines = ["IR {"]
    # an op's Scalar arguments are prim::Constant operands, printed first as upstream does
    tags = {id(n): _static_tags(n.entry) for n in order if n.kind == ir.OP}
    consts = {}
    for n in order:
        for _, val, is_scalar in tags.get(id(n), ()):
            if is_scalar:
                const = f"{_node_shape_text(n).split('[')[0]}[]"
                consts.setdefault(id(n), []).append(f"%{len(lines) - 1}")
                lines.append(f"  %{len(lines) - 1} = {const} prim::Constant(), xla_shape={const}, value={val}")
    ids = {}
    for n in order:
        shape = _node_shape_text(n)
        ids[id(n)] = len(lines) - 1
        if n.kind == ir.OP:
            args = []
            for child, idx in n.operands:
                s = f"%{ids[id(child)]}"
                if _n_outputs(child) > 1:
                    s += f".{idx}"
                args.append(s)
            args += consts.get(id(n), [])
            text = f"  %{ids[id(n)]} = {shape} {op_name(n.entry)}({', '.join(args)}), xla_shape={shape}"
            text += "".join(f", {k}={val}" for k, val, is_scalar in tags[id(n)] if not is_scalar)
        else:
            text = f"  %{ids[id(n)]} = {shape} xla::device_data(), xla_shape={shape}, device={dev}"
            if n.kind != ir.DATA:
                text += f", scalar={n.data!r}"
        loc = node_location(n)
        if loc:
            text += f", location={loc}"
        scope = getattr(n, "scope", None)
        if scope:
            text += f", scope={scope}"
        if id(n) in roots:
            text += f", ROOT={roots[id(n)]}"
        lines.append(text)
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_dot(values):
    order, ids, roots = _numbered(values)
    lines = ["digraph G {"]
    for n in order:
        if n.kind == ir.OP:
            label = f"{op_name(n.entry)}\\n{_node_shape_text(n)}"
            for k, val, _ in _static_tags(n.entry):
                val = val if len(val) < 64 else val[:64] + "..."
                label += f"\\n{k}={val}"
        else:
            label = f"xla::device_data\\n{_node_shape_text(n)}"
        loc = node_location(n)
        if loc:
            label += f"\\nlocation={loc}"
        if id(n) in roots:
            label += f"\\nROOT={roots[id(n)]}"
        label = label.replace('"', '\\"')
        lines.append(f"  node{ids[id(n)]} [label=\"{label}\"]")
    for n in reversed(order):
        nid = ids[id(n)]
        ops = n.operands
        for i, (child, idx) in enumerate(ops):
            edge = f"  node{ids[id(child)]} -> node{nid}"
            multi = _n_outputs(child) > 1
            if len(ops) > 1:
                edge += f" [label=\"i={i}" + (f",o={idx}" if multi else "") + "\"]"
            elif multi:
                edge += f" [label=\"o={idx}\"]"
            lines.append(edge)
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# HLO / StableHLO

def _hlo_debug():
    return env_flag("XLA_HLO_DEBUG") or env_flag("XLA_IR_DEBUG")


def lower(values, as_run=False, keep_unused=False):
    """jax Lowered for the graph computing `values` (abstract inputs: runs nothing).
    Lowered as a dump (`LoweringContext.dump`): collectives appear as HLO
    collectives over their replica groups, as upstream prints them, also in a
    process that is not part of a multi-process job. `as_run`: the unsharded
    inputs of a graph over sharded data are replicated, as the SPMD strategy
    compiles them (otherwise they carry no layout, as upstream prints them).
    `keep_unused`: every input stays a parameter of the module (inputs first,
    then the scalar pools), also one no output reads."""
    import jax
    from ..base.dtypes import to_jax
    from ..runtime.platform import jax_platform
    g = _graph(values)
    fn = g.build_fn(LoweringContext(jax_platform(), scope=op_scope if _hlo_debug() else None, dump=True))
    fn.__name__ = "IrToHlo"
    specs = g.input_specs(to_jax)
    first = None
    for i, p in enumerate(g.params):   # sharded device data keeps its layout in the text
        sh = getattr(p.data, "sharding", None)
        if sh is not None and len(sh.device_set) > 1:
            specs[i] = jax.ShapeDtypeStruct(specs[i].shape, specs[i].dtype, sharding=sh)
            first = first or sh
    if as_run and first is not None:
        from jax.sharding import NamedSharding, PartitionSpec
        from ..runtime import topology
        rep = NamedSharding(topology.mesh_of(first) or topology.spmd_mesh(), PartitionSpec())
        specs = [x if getattr(x, "sharding", None) is not None else
                 jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep) for x in specs]
    return jax.jit(fn, keep_unused=keep_unused).lower(*specs)


def _gspmd_text():
    """Upstream's HLO text spells shardings the GSPMD way (sharding={manual},
    SPMDFullToShardShape); JAX lowers for Shardy by default. Text only: what
    runs is compiled as JAX chooses."""
    import contextlib
    try:
        from jax._src import config as _cfg
        return _cfg.use_shardy_partitioner(False)
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


def _hlo_text(lowered):
    """HLO text as upstream prints it (HloModule::ToString's defaults: %names,
    each operand with its shape; metadata with XLA_HLO_DEBUG); where jaxlib
    does not expose the print options, JAX's own text."""
    debug = _hlo_debug()
    try:
        text = _module_text(lowered.compiler_ir("hlo"), debug)
    except (ImportError, AttributeError, TypeError):
        return lowered.as_text(dialect="hlo", debug_info=debug)
    return _opcode_names(text)


def _module_text(computation, metadata):
    from jaxlib import _hlo
    opts = _hlo.HloPrintOptions()
    opts.print_operand_shape = True
    opts.print_metadata = bool(metadata)
    return computation.get_hlo_module().to_string(opts)


def module_proto(values, name):
    """(serialized HloModuleProto named `name`, Graph) of the graph computing
    `values`: every input a parameter (graph inputs, then scalar pools), the
    shardings spelled the GSPMD way with explicit device lists, as upstream's
    LoweringContext builds it. Runs nothing."""
    from . import hlo_proto
    g = _graph(values)
    with _gspmd_text():
        computation = lower(g, keep_unused=True).compiler_ir("hlo")
    return hlo_proto.normalize(computation.as_serialized_hlo_module_proto(), name), g


def module_proto_hlo(proto):
    """HLO text of a serialized HloModuleProto, in upstream's spelling."""
    from jax._src.lib import xla_client
    computation = xla_client.XlaComputation(bytes(proto))
    try:
        return _opcode_names(_module_text(computation, _hlo_debug()))
    except (ImportError, AttributeError, TypeError):
        return computation.as_hlo_text()


_DEF = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .+? ([a-z][a-z0-9\-]*)\(([^)]*)", re.M)
_REF = re.compile(r"%([\w.\-]+)")
_HEAD = re.compile(r"(\(|, )([\w.\-]+): (?=[^\n]*\) -> [^\n]*\{$)", re.M)


def _opcode_names(text):
    """Instructions named as upstream's builder names them: after their opcode
    (`%add.1`, `%custom-call.2`) and parameters `%p<number>.<k>`, numbered per
    name in order, instead of after the JAX primitive that emitted them."""
    counts = collections.Counter()
    names = {}
    entry = text.find("\nENTRY ")
    # the entry computation is numbered first, as the builder makes it first
    for m in sorted(_DEF.finditer(text), key=lambda m: (m.start() < entry, m.start())):
        base = "p" + m.group(3).strip() if m.group(2) == "parameter" else m.group(2)
        counts[base] += 1
        names[m.group(1)] = f"{base}.{counts[base]}"
    text = _REF.sub(lambda m: "%" + names.get(m.group(1), m.group(1)), text)
    # computation headers list their parameters by name too
    return _HEAD.sub(lambda m: m.group(1) + names.get(m.group(2), m.group(2)) + ": ", text)


def to_hlo(values):
    """HLO text of the graph computing `values`: as lowered, or with
    XLA_DUMP_POST_OPTIMIZATIONS=1 as XLA compiles it (optimized and, for a
    graph over sharded data, partitioned: the collectives the SPMD partitioner
    inserted appear), as upstream compiles it for the dump."""
    if not _graph(values).roots:
        return ""
    with _gspmd_text():
        if env_flag("XLA_DUMP_POST_OPTIMIZATIONS"):
            return lower(values, as_run=True).compile().as_text()
        return _hlo_text(lower(values))


def to_stablehlo(values):
    if not _graph(values).roots:
        return ""
    return lower(values).as_text(debug_info=_hlo_debug())


def stablehlo_text(tensors=None):
    """xm.get_stablehlo: StableHLO text of the graph computing `tensors`
    (None: every live tensor with pending IR)."""
    return to_stablehlo(roots_of(tensors))


def stablehlo_bytecode(tensors=None):
    """xm.get_stablehlo_bytecode: the same module as MLIR bytecode."""
    values = roots_of(tensors)
    if not values:
        return b""
    from jax._src.interpreters import mlir
    return mlir.module_to_bytecode(lower(values).compiler_ir("stablehlo"))


# ---------------------------------------------------------------------------
# XLA_SAVE_TENSORS_FILE, XLA_SAVE_HLO_FILE

def save_tensors_file():
    """XLA_SAVE_TENSORS_FILE with the device ordinal appended (`path.0` in a
    single process), as upstream names it."""
    path = config.read("XLA_SAVE_TENSORS_FILE")
    if not path or path in ("STDOUT", "STDERR"):
        return path
    from ..runtime import topology
    return f"{path}.{topology.rank()}"


def save_format():
    return config.read("XLA_SAVE_TENSORS_FMT")   # a word other than text, dot, hlo, stablehlo raises


def render(values, fmt):
    if fmt == "text":
        return to_text(values)
    if fmt == "dot":
        return to_dot(values)
    if fmt == "hlo":
        return to_hlo(values)
    return to_stablehlo(values)


_hlo_cache = {}


def save_graph(values, frames, graph_hash, name="SyncTensorsGraph", output_shardings=None):
    path = save_tensors_file()
    values = _graph(values)
    if not path:
        return
    fmt = save_format()
    if fmt in ("hlo", "stablehlo"):
        key = (graph_hash, fmt)
        rec = _hlo_cache.get(key)
        if rec is None:
            rec = _hlo_cache[key] = render(values, fmt)
        body = rec
    else:
        body = None
    lines = [f"[{name}]", "TensorsGraphInfo:"]
    for fn, file, line in frames:
        lines.append(f"  {fn} ({file}:{line})")
    hashes = [f"{(v[0].hash + v[1]) & ((1 << 64) - 1):016x}" for v in values.roots]
    lines += ["", "Root Hashes: (" + ", ".join(hashes) + ")", "", "## BEGIN_GRAPH",
              (body if body is not None else render(values, fmt)).rstrip("\n"),
              f"Graph Hash: {graph_hash}", "", "## END_GRAPH", "", ""]
    if name == "dynamo":   # upstream ends this record with one more blank line
        lines.append("")
    if output_shardings is not None and fmt == "hlo":   # SPMD: the layout of every output
        lines[-1:] = ["#OUTPUT_SHARDING_BEGIN", ""] + list(output_shardings) + ["", "#OUTPUT_SHARDING_END", "", ""]
    _append(path, "\n".join(lines))


def _append(path, text):
    import sys
    if path == "STDOUT":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if path == "STDERR":
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    with _lock:
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "a") as f:
            f.write(text)


def save_failing_hlo(values, stage, exc):
    """XLA_SAVE_HLO_FILE: write the HLO of a graph that failed to compile or run.
    Returns the path written, or None."""
    path = ordinal_path(config.read("XLA_SAVE_HLO_FILE"))
    if not path:
        return None
    values = _graph(values)
    try:
        text = to_hlo(values)
    except Exception as e:  # noqa: BLE001 - fall back to the IR when lowering itself failed
        text = f"// lowering to HLO failed ({type(e).__name__}: {e}); IR follows\n" + to_text(values)
    header = f"// torch_xla: graph failed to {stage}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n"
    with _lock:
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "w") as f:
            f.write(header + text)
    return path




def op_trace(values):
    """The graph's ops in execution order, one line each as upstream's dynamic
    shape detector prints them ('[] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()');
    -> (graph key, lines)."""
    g = _graph(values)
    lines = [f"[] {op_name(n.entry)}, xla_shape={_node_shape_text(n)}, dynamic_dims: ()"
             for n in g.order]
    return g.key, lines


def tensors_report(tensors, nodes_threshold=100):
    """Upstream's live-tensor report: for each tensor whose IR has more than
    `nodes_threshold` nodes, its id, shape, device and node count, the user
    frame of its latest op (with XLA_IR_DEBUG) and its IR text."""
    out = []
    for t, value in tensors:
        g = Graph.capture([value])
        n = len(g.order) + len(g.params) + len(g.scalars)
        if n <= nodes_threshold:
            continue
        out.append(f"Tensor: id={id(t)}, shape={_node_shape(*value)}, device={t.device}, ir_nodes={n}\n")
        src = getattr(value[0], "src", None)
        if src is not None:
            fn, file, line = src
            out.append(f"Frames:\n  {fn} ({file}:{line})\n")
        out.append(to_text(g))
        out.append("\n\n")
    return "".join(out)

