"""Upstream's C++ verbose logs, from the engine's events.

Upstream torch_xla logs through TensorFlow's VLOG: `TF_CPP_VMODULE=name=level,...`
turns on the lines of one C++ file up to a level, `TF_CPP_MAX_VLOG_LEVEL` every
file's. Troubleshooting guides tell users to run

    TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=xla_graph_executor=5,pjrt_computation_client=3 python train.py

so the module names map onto the events of this engine, at upstream's levels:

  xla_graph_executor      3  each compile (begin, done) and each graph execution
                          4  each sync: its tensors and graph hash
                          5  cache hits, graph size
  pjrt_computation_client 1  each executable run and its outputs
                          3  each transfer to or from a device (shape, bytes)

Lines go to stderr in TSL's format (`I1127 19:30:00.123456  4242 file.cpp] ...`).
They are INFO lines, so a TF_CPP_MIN_LOG_LEVEL of 1 or more, set by the user,
silences them as it does upstream. Nothing subscribes unless a level is on.
"""
import fnmatch
import os
import sys
import time

from ..base import config, events
from ..runtime import topology
from .debug import hash_str

MODULES = ("xla_graph_executor", "pjrt_computation_client")
levels = {}      # module -> level on (only the modules with one > 0)


def parse(vmodule, max_level=0):
    """{module: level} from TF_CPP_VMODULE's text (`name=level,...`); a module
    not named gets max_level. Names are matched as TSL does: without extension,
    `*` and `?` wildcards allowed."""
    named = []
    for part in (vmodule or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, lvl = part.partition("=")
        try:
            level = int(lvl) if sep else 0
        except ValueError:
            raise ValueError(f"torch_xla: TF_CPP_VMODULE entry {part!r} is not name=level") from None
        named.append((name.strip(), level))
    out = {}
    for m in MODULES:
        level = max_level
        for pat, lvl in named:
            if fnmatch.fnmatchcase(m, pat):
                level = lvl
                break
        if level > 0:
            out[m] = level
    return out


def _line(module, text):
    t = time.time()
    lt = time.localtime(t)
    stamp = time.strftime("%m%d %H:%M:%S", lt) + f".{int((t % 1) * 1e6):06d}"
    sys.stderr.write(f"I{stamp} {os.getpid():>7} {module}.cpp] {text}\n")


def _on(module, level):
    return levels.get(module, 0) >= level


def _hash(graph):
    return hash_str(hash(graph.key))


def _name(d):
    return f"{d.platform.upper()}:{d.id}"


def _device():
    if topology.spmd_enabled():
        return "devices: " + ",".join(_name(d) for d in topology.spmd_devices())
    return "device " + _name(topology.upload_device())


def _on_captured(graph, reason, cached, **_):
    h = _hash(graph)   # subscribed only from level 4
    _line("xla_graph_executor", f"Trying to sync the value of {len(graph.roots)} tensor(s) ({reason})")
    _line("xla_graph_executor", f"Tensors graph hash {h} on {_device()}")
    if _on("xla_graph_executor", 5):
        _line("xla_graph_executor", f"TensorsGraphSize={len(graph.order)}")
        if cached:
            _line("xla_graph_executor", f"Cached computation (hash: {h}) is found")


def _on_compile_begin(graph, **_):
    if _on("xla_graph_executor", 3):
        _line("xla_graph_executor", f"Compiling IR graph hash {_hash(graph)} on {_device()} ...")


def _on_compiled(graph, **_):
    if _on("xla_graph_executor", 3):
        _line("xla_graph_executor", f"Compiling IR graph hash {_hash(graph)} on {_device()} done!")


def _on_executed(graph, **_):
    if _on("xla_graph_executor", 3):
        _line("xla_graph_executor", f"Executing IR graph hash {_hash(graph)} on {_device()} ...")
    if _on("pjrt_computation_client", 1):
        _line("pjrt_computation_client", f"Executing PjRt computation on {_device()}")
        _line("pjrt_computation_client", f"Returning {len(graph.roots)} results")


def _on_transferred(direction, shape, dtype, nbytes, devices, **_):
    if _on("pjrt_computation_client", 3):
        where = "to" if direction == "to_device" else "from"
        names = ",".join(sorted(_name(d) for d in devices))
        _line("pjrt_computation_client", f"Transfer {where} {names}: "
              f"{str(dtype).replace('torch.', '')}{list(shape)}, {nbytes} bytes")


_HANDLERS = (
    ("captured", _on_captured, "xla_graph_executor", 4),
    ("compile_begin", _on_compile_begin, "xla_graph_executor", 3),
    ("compiled", _on_compiled, "xla_graph_executor", 3),
    ("executed", _on_executed, None, 0),
    ("transferred", _on_transferred, "pjrt_computation_client", 3),
)


def install(vmodule=None, max_level=None):
    """Read the levels (the knobs, unless given) and subscribe what they turn on."""
    for kind, fn, _, _ in _HANDLERS:
        events.unsubscribe(kind, fn)
    levels.clear()
    if config.user_min_log_level() > 0:
        return
    levels.update(parse(config.read("TF_CPP_VMODULE") if vmodule is None else vmodule,
                        config.read("TF_CPP_MAX_VLOG_LEVEL") if max_level is None else max_level))
    for kind, fn, module, level in _HANDLERS:
        if module is None:
            wanted = _on("xla_graph_executor", 3) or _on("pjrt_computation_client", 1)
        else:
            wanted = _on(module, level)
        if wanted:
            events.subscribe(kind, fn)
