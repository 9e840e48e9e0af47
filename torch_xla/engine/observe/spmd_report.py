"""What XLA's SPMD partitioner made of a step, printed after each SPMD compile.

On when PT_XLA_DEBUG_LEVEL>=1 or XLA_SPMD_DEBUG=1 (a subscriber of the
executor's `compiled` event; nothing runs otherwise). The "SPMD Analysis:"
block lists:
  - each sharded input, named as the user's frames name it (model.fc1.weight),
    with its spec string and bytes per device;
  - the outputs' layouts XLA chose (how many replicated, which sharded);
  - the collectives in the partitioned program, by kind, with the bytes each
    produces per device per step (from the compiled HLO, so what really runs);
  - a warning for every all-gather that rebuilds a whole sharded input of at
    least XLA_SPMD_DEBUG_GATHER_BYTES (default 1 MiB) each step, with the
    user line whose mark_sharding annotated it: that weight is sharded at rest
    but gathered whole on every device every step.
"""
import re

from ..base import config, events
from ..ir.graph import xla_shape
from ..lazy.handlers import sharding as _sh
from . import debug

_P = "SPMD Analysis: "
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
          "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
          "f8e4m3fn": 1, "f8e5m2": 1}
_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = (.+?) (" + "|".join(_KINDS) + r")(-start)?\(")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9]fn)?)\[([0-9,]*)\]")
MAX_LINES = 16


def _arrays(type_text):
    """[(dtype, dims)] of an HLO result type (an array or a tuple of arrays)."""
    out = []
    for dt, dims in _ARRAY.findall(type_text):
        if dt in _BYTES:
            out.append((dt, tuple(int(d) for d in dims.split(",") if d)))
    return out


def _nbytes(dt, dims):
    n = _BYTES[dt]
    for d in dims:
        n *= d
    return n


def collectives(hlo_text):
    """The collectives of a compiled HLO module: [(kind, [(dtype, dims), ...], bytes)],
    bytes being what the op produces on one device (for an async `-start`, its
    largest buffer: the gathered or reduced result)."""
    found = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if m is None:
            continue
        arrays = _arrays(m.group(1))
        if not arrays:
            continue
        if m.group(3):
            arrays = [max(arrays, key=lambda a: _nbytes(*a))]
        found.append((m.group(2), arrays, sum(_nbytes(*a) for a in arrays)))
    return found


_COMP = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_CALLS = re.compile(r"\b(body|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def collectives_per_run(hlo_text):
    """The collectives one execution of a compiled HLO module performs:
    [(kind, count, bytes per device)], by kind. A collective inside a loop body
    counts once per iteration (the while's known trip count; once when XLA
    does not know it), inside a called computation once per call."""
    comps, entry, cur = {}, None, None
    for line in hlo_text.splitlines():
        m = _COMP.match(line)
        if m is not None and " = " not in line.split("{")[0]:
            cur = comps.setdefault(m.group(2), ([], []))
            if m.group(1):
                entry = m.group(2)
            continue
        if cur is None:
            continue
        m = _INSTR.match(line)
        if m is not None:
            arrays = _arrays(m.group(1))
            if arrays:
                if m.group(3):
                    arrays = [max(arrays, key=lambda a: _nbytes(*a))]
                cur[0].append((m.group(2), sum(_nbytes(*a) for a in arrays)))
            continue
        if "=" not in line:
            continue
        trips = _TRIPS.search(line)
        n = int(trips.group(1)) if trips is not None and "while(" in line else 1
        for what, name in _CALLS.findall(line):
            cur[1].append((name, n if what == "body" else 1))
        b = _BRANCHES.search(line)
        if b is not None:
            for name in b.group(1).split(","):
                cur[1].append((name.strip().lstrip("%"), 1))
    totals = {}
    memo = {}

    def walk(name, depth=0):
        if name in memo:
            return memo[name]
        out = {}
        comp = comps.get(name)
        if comp is not None and depth < 64:
            for kind, nbytes in comp[0]:
                c, b = out.get(kind, (0, 0))
                out[kind] = (c + 1, b + nbytes)
            for child, n in comp[1]:
                for kind, (c, b) in walk(child, depth + 1).items():
                    c0, b0 = out.get(kind, (0, 0))
                    out[kind] = (c0 + n * c, b0 + n * b)
        memo[name] = out
        return out

    if entry is not None:
        totals = walk(entry)
    return [(k, totals[k][0], totals[k][1]) for k in _KINDS if k in totals]


def _fmt_bytes(n):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _dtype_name(dtype):
    return xla_shape((), dtype).split("[")[0]


def _input_rows(graph, inputs, names, tensors):
    """Lines for the sharded inputs, and {(dtype, sorted dims): [(name, site)]} of them."""
    rows, by_shape, replicated = [], {}, 0
    for i, p in enumerate(graph.params):
        x = inputs[i] if i < len(inputs) else None
        s = getattr(x, "sharding", None)
        if s is None or len(s.device_set) == 1 or s.is_fully_replicated:
            replicated += 1
            continue
        shape, dtype = tuple(x.shape), _dtype_name(x.dtype)
        name = names.get(i, f"input {i}")
        t = tensors.get(i)
        site = getattr(t, "_sharding_site", None) if t is not None else None
        shard = s.shard_shape(getattr(x, "held", x.shape))
        per_dev = _nbytes(dtype, shard) if dtype in _BYTES else 0
        where = f" (annotated at {site[1]}:{site[2]} in {site[0]})" if site else ""
        rows.append(f"  {name} {dtype}{list(shape)} {_sh.format_sharding(s, len(shape))} "
                    f"{_fmt_bytes(per_dev)} per device{where}")
        # keyed by the sorted dims: XLA often gathers a weight in its transposed layout
        by_shape.setdefault((dtype, tuple(sorted(shape))), []).append((name, site))
    return rows, by_shape, replicated


def _output_rows(compiled, n_out):
    try:
        shardings = list(compiled.output_shardings)[:n_out]
        avals = list(compiled.out_info)[:n_out] if hasattr(compiled, "out_info") else None
    except Exception:  # noqa: BLE001 - a persistent-cache executable may not say
        return [f"{n_out} outputs (layouts not available)"]
    sharded, rep = [], 0
    for i, s in enumerate(shardings):
        if s is None or len(s.device_set) == 1 or s.is_fully_replicated:
            rep += 1
            continue
        shape = tuple(avals[i].shape) if avals is not None else None
        nd = len(shape) if shape is not None else len(getattr(s, "spec", ()))
        what = f"{list(shape)} " if shape is not None else ""
        sharded.append(f"  output {i} {what}{_sh.format_sharding(s, nd)}")
    head = f"outputs: {rep} replicated, {len(sharded)} sharded"
    return [head + (":" if sharded else "")] + sharded


def report(graph, executable):
    """The "SPMD Analysis:" block for a freshly compiled SPMD executable, or None."""
    compiled, shardings = debug.spmd_compiled(executable)
    if compiled is None:
        return None
    found = debug._input_tensors(graph)
    names = {i: nt[0] for i, nt in found.items()}
    tensors = {i: nt[1] for i, nt in found.items()}
    inputs = [_Laid(s, p) for s, p in zip(shardings, graph.params)]
    rows, by_shape, rep = _input_rows(graph, inputs, names, tensors)
    lines = [debug._RULE, f"sharded inputs: {len(rows)} (replicated: {rep})"]
    lines += rows[:MAX_LINES] + ([f"  ... and {len(rows) - MAX_LINES} more"] if len(rows) > MAX_LINES else [])
    out = _output_rows(compiled, len(graph.roots))
    lines += out[:MAX_LINES + 1]
    try:
        text = compiled.as_text() or ""
    except Exception:  # noqa: BLE001
        text = ""
    coll = collectives(text)
    if not coll:
        lines.append("collectives per step: none")
    else:
        per_kind = {}
        for kind, _, nb in coll:
            c, b = per_kind.get(kind, (0, 0))
            per_kind[kind] = (c + 1, b + nb)
        parts = [f"{k} x{c} {_fmt_bytes(b)}" for k, (c, b) in per_kind.items()]
        total = sum(b for _, b in per_kind.values())
        lines.append(f"collectives per step: {', '.join(parts)}; {_fmt_bytes(total)} per device")
    limit = config.read("XLA_SPMD_DEBUG_GATHER_BYTES")
    for kind, arrays, nb in coll:
        if kind != "all-gather" or nb < limit:
            continue
        for dt, dims in arrays:
            for name, site in by_shape.get((dt, tuple(sorted(dims))), ()):
                where = f"; annotated at {site[1]}:{site[2]} in {site[0]}" if site else ""
                lines.append(f"WARNING: {name} ({dt}{list(dims)} in the program) is all-gathered whole every "
                             f"step ({_fmt_bytes(_nbytes(dt, dims))} per device){where}. Its sharding does not "
                             "fit how the step uses it: shard it along another dimension, or leave it replicated.")
    lines.append(debug._RULE)
    return "\n".join(_P + ln for ln in lines) + "\n"


class _Laid:
    """An input as the executable was compiled for it: its sharding and aval, and
    the shape its data is held in (padded under an uneven layout, lazy/padding.py)."""
    __slots__ = ("sharding", "shape", "dtype", "held")

    def __init__(self, sharding, param):
        self.sharding = sharding
        self.shape, self.dtype = param.entry   # a data leaf's aval
        data = param.data
        self.held = tuple(data.shape) if data is not None else tuple(self.shape)


def _on_compiled(graph, executable, reason):
    if not debug._is_master() or debug._eager_now():
        return
    text = report(graph, executable)
    if text:
        debug._emit(text)


def install():
    """Subscribe when PT_XLA_DEBUG_LEVEL>=1 or XLA_SPMD_DEBUG=1."""
    if debug.LEVEL >= 1 or config.read("XLA_SPMD_DEBUG"):
        events.subscribe("compiled", _on_compiled)
