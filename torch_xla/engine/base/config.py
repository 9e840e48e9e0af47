"""Every environment variable torch_xla reads, declared once.

A `Knob` gives a variable's name, its type, its default, when torch_xla reads
it and what it means; `KNOBS` is the one table, in the groups docs/reference/knobs.md
shows (that page is generated from here: `python scripts/gen_knob_table.py`).
No other module of the package reads `os.environ` (tests/engine/test_knobs.py
checks it); modules that hand an environment to child processes still write it.

Reading:

  read(name)      the typed value now: an override, else the environment, else
                  the knob it falls back to, else its default (an empty value
                  counts as unset); a value that does not parse raises ValueError
  is_set(name)    whether an override or the environment gives it a value
  raw(name)       the text as set (override or environment), or None

Naming an undeclared variable raises `UnknownKnob`, with the nearest declared
name, so a misspelt name fails instead of reading as unset.

`override(**values)` replaces knobs for a block (tests). Most knobs are read at
each use, so an override simply applies. A knob read once (at import, or at the
first device use) is cached by the module that reads it: override refreshes
that copy through the hook the module registered (`on_override`), or, for a
knob whose cached value cannot change safely, refuses with `KnobReadOnce`.
"""
import contextlib
import difflib
import os
import sys

# ---------------------------------------------------------------------------
# when a knob is read

LIVE = "each use"
IMPORT = "import"
FIRST_USE = "first device use"
START = "runtime start"
LAUNCH = "launch"

WHEN = {
    LIVE: "read whenever torch_xla needs it: setting it (or `config.override`) takes effect at the next use",
    IMPORT: "read once, when `torch_xla` is imported: set it in the environment before the import",
    FIRST_USE: "read once, when the first tensor reaches the device (XLA_USE_32BIT_LONG: when the first "
               "64-bit integer does): set it before that",
    START: "read when the runtime starts or this process joins its job (the first device use, or the "
           "launcher): set it before that",
    LAUNCH: "read by `torch_xla.launch` / `xmp.spawn` when they start the replicas",
}

_CACHED = (IMPORT, FIRST_USE)   # the reading module keeps a copy: override needs its hook


# ---------------------------------------------------------------------------
# types

_TRUE = ("1", "true", "yes", "on", "y")
_FALSE = ("0", "false", "no", "off", "n")


class Kind:
    """How a knob's text becomes its value: `name` for the docs, `parse(text)`."""

    def __init__(self, name, parse, check):
        self.name = name
        self.parse = parse
        self.check = check      # does a Python default have this type?

    def __repr__(self):
        return f"Kind({self.name})"


def _flag(text):
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError("a flag (1/0, true/false, yes/no, on/off)")


def _int(text):
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("an integer") from None


def _float(text):
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("a number") from None


FLAG = Kind("flag", _flag, lambda v: isinstance(v, bool))
INT = Kind("int", _int, lambda v: isinstance(v, int) and not isinstance(v, bool))
FLOAT = Kind("float", _float, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
STR = Kind("str", str, lambda v: isinstance(v, str))
PATH = Kind("path", str, lambda v: isinstance(v, str))


def choice(*values):
    """One of `values` (compared lower-case)."""
    def parse(text):
        t = text.strip().lower()
        if t not in values:
            raise ValueError("one of " + ", ".join(values))
        return t
    return Kind("one of " + " / ".join(values), parse, lambda v: v in values)


# ---------------------------------------------------------------------------
# declarations

class Knob:
    """One environment variable: name, kind, default, when it is read, meaning.

    `fallback` names the knob whose value is used when this one is unset.
    `refreshable`: a knob read once whose module can take a new value at any
    time; that module registers the hook (`refresh`, through `on_override`)
    that config.override calls."""
    __slots__ = ("name", "kind", "default", "when", "meaning", "fallback", "refreshable", "group", "refresh")

    def __init__(self, name, kind, default, when, meaning, fallback=None, refreshable=False):
        if when not in WHEN:
            raise ValueError(f"{name}: when={when!r} is not one of {sorted(WHEN)}")
        if default is not None and not kind.check(default):
            raise TypeError(f"{name}: default {default!r} is not of kind {kind.name}")
        if refreshable and when not in _CACHED:
            raise ValueError(f"{name}: only a knob read once is refreshed")
        self.name = name
        self.kind = kind
        self.default = default
        self.when = when
        self.meaning = meaning
        self.fallback = fallback
        self.refreshable = refreshable
        self.group = None
        self.refresh = None

    @property
    def cached(self):
        return self.when in _CACHED

    def parse(self, text):
        try:
            return self.kind.parse(text)
        except ValueError as e:
            raise ValueError(f"torch_xla: {self.name}={text!r} is not {e} ({self.name}: {self.meaning})") from None

    def __repr__(self):
        return f"Knob({self.name}, {self.kind.name}, default={self.default!r}, read at {self.when})"


KNOBS = {}     # name -> Knob, in the order of the table
GROUPS = []    # (title, [Knob]) in the order of the table


def _group(title, *knobs):
    GROUPS.append((title, list(knobs)))
    for k in knobs:
        if k.name in KNOBS:
            raise ValueError(f"{k.name} is declared twice")
        k.group = title
        KNOBS[k.name] = k


_group(
    "Tracing and compilation",
    Knob("XLA_NO_SPECIAL_SCALARS", FLAG, False, IMPORT,
         "feed the scalars 0 and 1 as data too (by default they are constants of the graph)", refreshable=True),
    Knob("XLA_SKIP_LOWERING_CHECK", FLAG, False, LIVE,
         "skip the abstract check of a lowering when an op first meets its shapes"),
    Knob("XLA_CHECK_INDICES", FLAG, True, IMPORT,
         "check the indices of indexing ops on the device and raise IndexError at the next host read; "
         "0: off (gathers clamp, scatters drop out-of-range writes)", refreshable=True),
    Knob("XLA_COMPILATION_CACHE_SIZE", INT, 2048, LIVE, "executables kept in memory (LRU)"),
    Knob("XLA_ENABLE_PARAM_ALIASING", FLAG, True, LIVE, "donate the buffers a full barrier overwrites"),
    Knob("XLA_SCAN_RECOMPUTE", FLAG, False, LIVE,
         "the backward of scan and other function nodes recomputes the forward instead of taking its "
         "residuals as extra outputs of the forward node"),
    Knob("XLA_PERSISTENT_CACHE_PATH", PATH, "", IMPORT,
         "on-disk executable cache (as `xr.initialize_cache(path)`)"),
    Knob("XLA_PERSISTENT_CACHE_READ_ONLY", FLAG, False, IMPORT,
         "with XLA_PERSISTENT_CACHE_PATH: load from the disk cache, never write"),
    Knob("XLA_USE_SPMD", FLAG, False, IMPORT, "start in SPMD mode (as `xr.use_spmd()`)"),
    Knob("XLA_USE_EAGER_DEBUG_MODE", FLAG, False, IMPORT, "run every op at once (eager mode)"),
    Knob("XLA_GC_GEN0_THRESHOLD", INT, 50000, IMPORT,
         "raise Python's first garbage-collection threshold to at least this many objects at import "
         "(0: leave Python's settings alone); a traced step keeps its graph's objects alive until the "
         "barrier, and at Python's default of 700 the collector would scan them, and every so often the "
         "whole heap of torch and JAX, many times a step"),
    Knob("XLA_FLAGS", STR, "", START,
         "XLA's own compiler flags (XLA reads them when its backend starts); part of the persistent "
         "cache's key; replicas on the CPU get them without --xla_force_host_platform_device_count"),
)

_group(
    "Device storage types",
    Knob("XLA_USE_BF16", FLAG, False, FIRST_USE, "store f32 and f64 as bf16"),
    Knob("XLA_DOWNCAST_BF16", FLAG, False, FIRST_USE, "store f32 as bf16, f64 as f32"),
    Knob("XLA_USE_FP16", FLAG, False, FIRST_USE, "store f32 and f64 as f16"),
    Knob("XLA_USE_F16", FLAG, False, FIRST_USE, "older spelling of XLA_USE_FP16 (Lightning's XLAPrecision sets it)"),
    Knob("XLA_DOWNCAST_FP16", FLAG, False, FIRST_USE, "store f32 as f16, f64 as f32"),
    Knob("XLA_USE_32BIT_LONG", FLAG, False, FIRST_USE, "store int64 and uint64 as 32-bit integers"),
)

_group(
    "Runtime and devices",
    Knob("PJRT_DEVICE", STR, "CPU", START, "the platform: CPU, CUDA (or GPU) or TPU"),
    Knob("PJRT_SELECT_DEFAULT_DEVICE", FLAG, True, LIVE,
         "0, with PJRT_DEVICE unset: `xr.device_type()` answers None instead of the default platform"),
    Knob("CPU_NUM_DEVICES", INT, 1, START, "host devices (one process each, or the SPMD devices of one process)"),
    Knob("GPU_NUM_DEVICES", INT, 0, START, "GPUs to use (0: every visible one)"),
    Knob("CUDA_VISIBLE_DEVICES", STR, "", START,
         "with GPU_NUM_DEVICES unset, the GPUs counted (else the ones nvidia-smi lists)"),
    Knob("TPU_NUM_DEVICES", INT, 0, START, "TPU chips to use (0: every one)"),
    Knob("XLA_LOCAL_DEVICE_INDEX", INT, 0, START, "which local JAX device backs xla:0"),
    Knob("XLA_EXIT_WAIT_S", FLOAT, 900.0, LIVE,
         "seconds the interpreter's exit waits for launched executions"),
    Knob("XLA_PROFILER_PYTHON_TRACER", FLAG, None, LIVE,
         "1/0: trace Python calls in profiles (unset: on from Python 3.12; before it the tracer races "
         "torch's dispatch on other threads)"),
)

_group(
    "Processes, hosts and the launcher",
    Knob("WORLD_SIZE", INT, 1, LIVE, "processes in the job (the launcher, torchrun)", fallback="XLA_WORLD_SIZE"),
    Knob("XLA_WORLD_SIZE", INT, 1, LIVE, "upstream's spelling of WORLD_SIZE"),
    Knob("RANK", INT, 0, LIVE, "this process's index in the job", fallback="XLA_GLOBAL_ORDINAL"),
    Knob("XLA_GLOBAL_ORDINAL", INT, 0, LIVE, "upstream's spelling of RANK"),
    Knob("PJRT_LOCAL_PROCESS_RANK", INT, 0, LIVE, "this process's index on its host", fallback="LOCAL_RANK"),
    Knob("LOCAL_RANK", INT, 0, LIVE, "this process's index on its host (the launcher, torchrun)",
         fallback="XLA_LOCAL_ORDINAL"),
    Knob("XLA_LOCAL_ORDINAL", INT, 0, LIVE, "upstream's spelling of LOCAL_RANK"),
    Knob("LOCAL_WORLD_SIZE", INT, 1, LIVE, "processes of the job on this host", fallback="XLA_LOCAL_WORLD_SIZE"),
    Knob("XLA_LOCAL_WORLD_SIZE", INT, 1, LIVE, "upstream's spelling of LOCAL_WORLD_SIZE"),
    Knob("GROUP_RANK", INT, 0, LIVE, "this host's index in the job", fallback="XLA_HOST_INDEX"),
    Knob("XLA_HOST_INDEX", INT, 0, LIVE, "upstream's spelling of GROUP_RANK (a host may give its own index)"),
    Knob("XLA_NUM_HOSTS", INT, 1, LAUNCH, "hosts of a job started by the launcher on each"),
    Knob("MASTER_ADDR", STR, "127.0.0.1", LAUNCH,
         "the first host: where the launchers of several hosts meet, torch.distributed's store and, "
         "without XLA_COORDINATOR_ADDRESS, JAX's coordinator"),
    Knob("MASTER_PORT", INT, 12355, LAUNCH,
         "the port at MASTER_ADDR: the launchers of several hosts meet there; torch.distributed's store "
         "(under torchrun: its agent's store); JAX's coordinator when nothing else names one. On one "
         "host, unset: the launcher picks a free port for each job"),
    Knob("XLA_COORDINATOR_ADDRESS", STR, "", START, "JAX's coordinator, host:port (set by the launcher)"),
    Knob("TORCHELASTIC_RUN_ID", STR, "", LIVE,
         "set by torchrun: this process is already a replica (`torch_xla.launch` runs fn here) and "
         "rank 0 publishes JAX's coordinator port in torchrun's store"),
    Knob("TORCHELASTIC_RESTART_COUNT", INT, 0, START, "set by torchrun: which attempt this is (the store key)"),
    Knob("XLA_DIST_INIT_TIMEOUT", INT, 300, START, "seconds to wait for every process to join the job"),
    Knob("XLA_HEARTBEAT_TIMEOUT", INT, 60, START,
         "seconds without a heartbeat before jax.distributed gives a process up"),
    Knob("XLA_SHUTDOWN_TIMEOUT", INT, 1800, START, "seconds a finished process waits for the others at shutdown"),
    Knob("XLA_COLLECTIVE_TIMEOUT", FLOAT, 1800.0, LIVE,
         "seconds before a collective that never completes ends the job"),
    Knob("XLA_RENDEZVOUS_TIMEOUT", FLOAT, None, LIVE,
         "seconds `xm.rendezvous` and `xm.mesh_reduce` wait for the other processes",
         fallback="XLA_COLLECTIVE_TIMEOUT"),
    Knob("XLA_ALWAYS_ALLREDUCE", FLAG, False, LIVE,
         "trace the collectives in a job of one process too (otherwise all_reduce, all_gather and "
         "reduce_scatter are copies there)"),
    Knob("XLA_JOB_DUMP", PATH, "", LIVE, "prefix: append each job program's HLO to `<prefix>.<rank>.txt`"),
    Knob("XLA_SHARE_COMPILATION", FLAG, True, LIVE,
         "one process of a job compiles each job-wide program, the others load it"),
    Knob("XLA_SHARE_COMPILATION_TIMEOUT", FLOAT, 1800.0, LIVE,
         "seconds to wait for another process's compile before compiling here"),
    Knob("XLA_SHARE_COMPILATION_SECRET", STR, "", LIVE,
         "key that signs the executables a job shares (HMAC-SHA256); without it nothing is shared. "
         "torch_xla.launch / xmp.spawn on one host make one per job; give every process the same "
         "value yourself under torchrun or across hosts"),
)

_group(
    "TPU hosts",
    Knob("TPU_ACCELERATOR_TYPE", STR, "", LIVE, "the TPU type and size, e.g. v4-8", fallback="ACCELERATOR_TYPE"),
    Knob("ACCELERATOR_TYPE", STR, "", LIVE, "another spelling of TPU_ACCELERATOR_TYPE"),
    Knob("TPU_PROCESS_BOUNDS", STR, "", LIVE, "processes over every host of the slice, e.g. 2,2,1"),
    Knob("TPU_WORKER_HOSTNAMES", STR, "", LIVE, "the slice's hosts, comma-separated"),
    Knob("TPU_WORKER_ID", INT, 0, LIVE, "this host's index in the slice"),
    Knob("CLOUD_TPU_TASK_ID", INT, None, LIVE, "this process's index among the TPU worker processes"),
)

_group(
    "Debugging and metrics",
    Knob("PT_XLA_DEBUG_LEVEL", INT, 0, IMPORT, "1: compilation analysis, 2: also execution analysis"),
    Knob("PT_XLA_DEBUG", FLAG, False, IMPORT, "with PT_XLA_DEBUG_LEVEL unset: every analysis (level 100)"),
    Knob("PT_XLA_DEBUG_FILE", PATH, "", LIVE, "write the analyses to this file instead of stderr"),
    Knob("PT_XLA_DEBUG_MAX_FRAME", INT, 8, LIVE, "Python frames printed per analysis"),
    Knob("XLA_IR_DEBUG", FLAG, False, IMPORT, "IR nodes record the user's line"),
    Knob("XLA_HLO_DEBUG", FLAG, False, IMPORT, "HLO op_name metadata carries the aten op and the user's line"),
    Knob("XLA_DUMP_POST_OPTIMIZATIONS", FLAG, False, LIVE,
         "HLO dumps (`_get_xla_tensors_hlo`, XLA_SAVE_TENSORS_FMT=hlo) show the graph as XLA compiled it "
         "(optimized; partitioned in SPMD mode)"),
    Knob("XLA_GRAPH_SIZE_WARNING", INT, 4000, LIVE,
         "warn (once per user line) when a graph this large compiles; 0: never"),
    Knob("XLA_SAVE_TENSORS_FILE", PATH, "", LIVE, "append every executed graph to this file (STDOUT, STDERR)"),
    Knob("XLA_SAVE_TENSORS_FMT", choice("text", "dot", "hlo", "stablehlo"), "text", LIVE,
         "the format of XLA_SAVE_TENSORS_FILE"),
    Knob("XLA_SAVE_GRAPH_FMT", choice("text", "dot", "hlo"), "text", LIVE,
         "the format of `torch_xla.debug.graph_saver.save_tensors_graph`"),
    Knob("XLA_SAVE_HLO_FILE", PATH, "", LIVE, "keep the HLO of a graph that fails to compile or run"),
    Knob("XLA_METRICS_FILE", PATH, "", LIVE, "append the metrics report at every barrier (STDERR: print it)"),
    Knob("XLA_METRICS_SAMPLES", INT, 1024, IMPORT, "samples kept per metric"),
    Knob("XLA_METRICS_PERCENTILES", STR, "0.01:0.05:0.1:0.2:0.5:0.8:0.9:0.95:0.99", LIVE,
         "the percentiles of the metrics report, colon-separated, each in (0, 1)"),
    Knob("TF_CPP_VMODULE", STR, "", IMPORT,
         "upstream's C++ log modules and levels, e.g. xla_graph_executor=5,pjrt_computation_client=3: "
         "compiles, executions, syncs and transfers are logged to stderr at upstream's levels"),
    Knob("TF_CPP_MAX_VLOG_LEVEL", INT, 0, IMPORT, "the TF_CPP_VMODULE level of every module it does not name"),
    Knob("TF_CPP_MIN_LOG_LEVEL", INT, 0, IMPORT,
         "as set by the user: 1 or more silences the TF_CPP_VMODULE lines (JAX's own default applies to XLA)"),
    Knob("XLA_SPMD_DEBUG", FLAG, False, IMPORT, "print the SPMD analysis after each sharded compile"),
    Knob("XLA_SPMD_DEBUG_GATHER_BYTES", INT, 1 << 20, LIVE,
         "the SPMD analysis warns of a weight all-gathered whole when it is this large (bytes)"),
)

_group(
    "Helpers of the public modules",
    Knob("DEBUG", INT, 0, LIVE, "`torch_xla.utils.utils.get_print_fn()` prints when nonzero"),
    Knob("TORCH_XLA_SANITY_VERBOSE", FLAG, False, LIVE,
         "the sanity command prints the tracebacks of failures (its --verbose sets it)"),
)

for _k in KNOBS.values():
    if _k.fallback is not None and _k.fallback not in KNOBS:
        raise ValueError(f"{_k.name} falls back to undeclared {_k.fallback}")
del _k


# ---------------------------------------------------------------------------
# errors

class UnknownKnob(KeyError):
    """A name that is not declared in KNOBS."""

    def __str__(self):
        return self.args[0]


class KnobReadOnce(RuntimeError):
    """config.override of a knob whose module keeps the value it read once."""


def knob(name):
    """The declaration of `name` (UnknownKnob when there is none)."""
    k = KNOBS.get(name)
    if k is None:
        raise _unknown(name)
    return k


def _unknown(name):
    near = difflib.get_close_matches(str(name), KNOBS, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else ""
    return UnknownKnob(f"torch_xla: {name!r} is not a declared knob{hint} (every variable torch_xla reads "
                       "is declared in torch_xla/engine/base/config.py, listed in docs/reference/knobs.md)")


# ---------------------------------------------------------------------------
# reading

_overrides = {}   # name -> text, or None for "unset during this block"
_MISSING = object()


def _text(name):
    if _overrides:
        v = _overrides.get(name, _MISSING)
        if v is not _MISSING:
            return v
    return os.environ.get(name)


def read(name):
    """The knob's typed value now (see the module's docstring)."""
    k = KNOBS.get(name)
    if k is None:
        raise _unknown(name)
    text = _text(name)
    if not text:
        return read(k.fallback) if k.fallback is not None else k.default
    return k.parse(text)


def is_set(name):
    """True when an override or the environment gives the knob a (non-empty) value."""
    if name not in KNOBS:
        raise _unknown(name)
    return bool(_text(name))


def raw(name):
    """The knob's text as set (an override or the environment), or None."""
    if name not in KNOBS:
        raise _unknown(name)
    return _text(name)


def environ_value(name):
    """For helpers that read a variable their caller names (upstream's
    `xu.getenv_as`): a declared knob's text as `raw` gives it, any other
    variable's from the environment."""
    if name in KNOBS:
        return _text(name)
    return os.environ.get(name)


def debug_level():
    """PT_XLA_DEBUG_LEVEL (PT_XLA_DEBUG=1 without it means every level)."""
    if is_set("PT_XLA_DEBUG_LEVEL"):
        return read("PT_XLA_DEBUG_LEVEL")
    return 100 if read("PT_XLA_DEBUG") else 0


def records_sources():
    """IR nodes remember the user's line (read once, at import, by ir)."""
    return debug_level() >= 1 or read("XLA_IR_DEBUG") or read("XLA_HLO_DEBUG")


# ---------------------------------------------------------------------------
# overriding

def on_override(name, refresh):
    """Register the hook of the module that keeps its own copy of knob `name`
    (read once): `refresh()` re-reads it when an override begins and ends."""
    k = knob(name)
    if not k.refreshable:
        raise ValueError(f"{name} is not declared refreshable (config.override refuses it)")
    k.refresh = refresh


def _as_text(value):
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


@contextlib.contextmanager
def override(**values):
    """Replace knobs for a block: `with config.override(XLA_SAVE_TENSORS_FILE="/tmp/x"):`.
    None unsets a knob for the block. An undeclared name raises UnknownKnob, a
    malformed value ValueError, a knob read once whose module registered no
    refresh hook KnobReadOnce; nothing is replaced then."""
    texts = {}
    hooks = []
    for name, value in values.items():
        k = knob(name)
        text = _as_text(value)
        if text:
            k.parse(text)
        if k.cached:
            if k.refresh is None:
                raise KnobReadOnce(
                    f"torch_xla: config.override cannot change {name}: the module that reads it keeps "
                    f"the value it read once ({k.when}); {WHEN[k.when]}")
            if k.refresh not in hooks:
                hooks.append(k.refresh)
        texts[name] = text
    saved = dict(_overrides)
    _overrides.update(texts)
    try:
        for h in hooks:
            h()
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
        for h in hooks:
            h()


# ---------------------------------------------------------------------------
# the docs page

def _cell(text):
    return str(text).replace("|", "\\|")


def _default_text(k):
    if k.fallback is not None:
        tail = "" if k.default in (None, "") else f", else `{_value_text(k.default)}`"
        return f"`{k.fallback}`{tail}"
    if k.default is None or k.default == "":
        return "unset"
    return f"`{_value_text(k.default)}`"


def _value_text(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float) and v == int(v):
        return str(int(v))
    return str(v)


def markdown():
    """docs/reference/knobs.md: every knob, grouped as in KNOBS."""
    out = [
        "# Knobs: the environment variables torch_xla reads",
        "",
        "Generated from the declarations in `torch_xla/engine/base/config.py` by",
        "`python scripts/gen_knob_table.py`; do not edit by hand (tests/engine/test_knobs.py",
        "checks that this page is current).",
        "",
        "An empty value counts as unset. A value that does not parse as its type raises",
        "`ValueError` naming the variable. Types: `flag` takes 1/0, true/false, yes/no, on/off",
        "(any case); `int`, `float`, `str`, `path`, or one of a list of words. A default naming",
        "another variable means that variable's value is used when this one is unset.",
        "",
        "When each one is read:",
        "",
    ]
    for when, text in WHEN.items():
        out.append(f"- **{when}**: {text}")
    out += [
        "",
        "In tests, `torch_xla.engine.base.config.override(NAME=value)` replaces knobs for a block. A knob",
        "read once is kept by the module that reads it: an override refreshes that copy where the table",
        "says *refreshed*, and is refused otherwise.",
        "",
    ]
    for title, knobs in GROUPS:
        out += [f"## {title}", "", "| name | type | default | read | meaning |", "| --- | --- | --- | --- | --- |"]
        for k in knobs:
            when = f"{k.when} (override: refreshed)" if k.refreshable else k.when
            out.append(f"| `{k.name}` | {_cell(k.kind.name)} | {_cell(_default_text(k))} | {when} | "
                       f"{_cell(k.meaning)} |")
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# JAX writes into os.environ: TF_CPP_MIN_LOG_LEVEL when imported, TPU_SKIP_MDS_QUERY when
# its backend starts on a machine without TPU chips. A user's environment must not change
# because torch_xla was imported or started (Lightning's tests fail on leaked variables),
# so what was there before JAX came is put back; JAX's quiet log level still holds while
# the backend starts (jax_env_during_start).
_JAX_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TPU_SKIP_MDS_QUERY")
_jax_env = None if "jax" in sys.modules else {k: os.environ.get(k) for k in _JAX_ENV}


def user_min_log_level():
    """TF_CPP_MIN_LOG_LEVEL as the user set it (JAX writes its own default when imported)."""
    if _jax_env is not None:
        text = _jax_env["TF_CPP_MIN_LOG_LEVEL"]
        return KNOBS["TF_CPP_MIN_LOG_LEVEL"].parse(text) if text and text.strip() else 0
    return read("TF_CPP_MIN_LOG_LEVEL")


def restore_jax_env():
    """Undo what JAX wrote into os.environ (nothing when the user imported JAX first)."""
    if _jax_env is None:
        return
    for k, v in _jax_env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def jax_env_during_start():
    """JAX's own defaults while its backend starts, the user's environment after."""
    if _jax_env is not None and _jax_env["TF_CPP_MIN_LOG_LEVEL"] is None:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    try:
        yield
    finally:
        restore_jax_env()

