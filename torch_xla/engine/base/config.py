"""Every environment knob the engine reads, in one place.

`KNOBS` lists each variable with its default and meaning. `get(name)` reads
the environment when called (tests and users set some of these at run time);
`override(**values)` replaces them for a block (tests). Knobs read once at
import (they shape tracing or the device's storage types) are constants of
the modules that use them and say so here.
"""
import contextlib
import os
import sys

_TRUE = ("1", "true", "yes", "on")

# name -> (default, meaning)
KNOBS = {
    # tracing and compilation
    "XLA_NO_SPECIAL_SCALARS": ("0", "feed 0 and 1 as data too (read at import)"),
    "XLA_SKIP_LOWERING_CHECK": ("0", "skip the abstract check of a lowering on a memo miss"),
    "XLA_COMPILATION_CACHE_SIZE": ("2048", "executables kept in memory (LRU)"),
    "XLA_ENABLE_PARAM_ALIASING": ("1", "donate buffers a full barrier overwrites"),
    "XLA_PERSISTENT_CACHE_PATH": ("", "on-disk executable cache (read at start-up)"),
    "XLA_PERSISTENT_CACHE_READ_ONLY": ("0", "load from the disk cache, never write"),
    "XLA_USE_BF16": ("0", "store f32/f64 as bf16 (read at the first device use)"),
    "XLA_DOWNCAST_BF16": ("0", "store f32 as bf16, f64 as f32 (read at the first device use)"),
    "XLA_USE_FP16": ("0", "store f32/f64 as f16 (read at the first device use)"),
    "XLA_USE_F16": ("0", "older spelling of XLA_USE_FP16 (Lightning's XLAPrecision sets it)"),
    "XLA_DOWNCAST_FP16": ("0", "store f32 as f16, f64 as f32 (read at the first device use)"),
    "XLA_USE_SPMD": ("0", "start in SPMD mode"),
    "XLA_USE_EAGER_DEBUG_MODE": ("0", "run every op at once (eager mode)"),
    # runtime and topology
    "PJRT_DEVICE": ("CPU", "the platform: CPU, CUDA/GPU or TPU"),
    "CPU_NUM_DEVICES": ("1", "host devices (one process each, or SPMD devices)"),
    "GPU_NUM_DEVICES": ("0", "GPUs to use (0: every visible one)"),
    "TPU_NUM_DEVICES": ("0", "TPU chips to use (0: every one)"),
    "XLA_LOCAL_DEVICE_INDEX": ("0", "which local JAX device backs xla:0"),
    "XLA_COORDINATOR_ADDRESS": ("", "jax.distributed coordinator (set by the launcher)"),
    "XLA_DIST_INIT_TIMEOUT": ("300", "seconds to wait for every process to join the job"),
    "XLA_HEARTBEAT_TIMEOUT": ("60", "seconds without a heartbeat before jax.distributed gives a process up"),
    "XLA_SHUTDOWN_TIMEOUT": ("1800", "seconds a finished process waits for the others at shutdown"),
    "XLA_NUM_HOSTS": ("1", "hosts of a job started by the launcher on each"),
    "XLA_EXIT_WAIT_S": ("900", "seconds the interpreter's exit waits for launched executions"),
    "XLA_COLLECTIVE_TIMEOUT": ("1800", "seconds before a collective that never completes ends the job"),
    "XLA_JOB_DUMP": ("", "prefix: append each job program's HLO to <prefix>.<rank>.txt"),
    "XLA_SHARE_COMPILATION": ("1", "one process of a job compiles each job-wide program, the others load it"),
    "XLA_SHARE_COMPILATION_TIMEOUT": ("1800", "seconds to wait for another process's compile before compiling here"),
    # observability
    "PT_XLA_DEBUG_LEVEL": ("", "1: compilation analysis, 2: also execution analysis"),
    "PT_XLA_DEBUG": ("0", "same as PT_XLA_DEBUG_LEVEL=100"),
    "PT_XLA_DEBUG_FILE": ("", "write the analyses to this file instead of stderr"),
    "PT_XLA_DEBUG_MAX_FRAME": ("8", "Python frames printed per analysis"),
    "XLA_IR_DEBUG": ("0", "IR nodes record the user's line (read at import)"),
    "XLA_HLO_DEBUG": ("0", "HLO op_name metadata carries aten op and user line (read at import)"),
    "XLA_GRAPH_SIZE_WARNING": ("4000", "warn (once per user line) when a graph this large compiles; 0: never"),
    "XLA_SAVE_TENSORS_FILE": ("", "append every executed graph to this file"),
    "XLA_SAVE_TENSORS_FMT": ("text", "text, dot, hlo or stablehlo"),
    "XLA_SAVE_HLO_FILE": ("", "keep the HLO of a graph that fails to compile or run"),
    "XLA_METRICS_FILE": ("", "append the metrics report at every barrier"),
    "XLA_METRICS_SAMPLES": ("1024", "samples kept per metric (read at import)"),
    "XLA_METRICS_PERCENTILES": ("0.01:0.05:0.1:0.2:0.5:0.8:0.9:0.95:0.99", "report percentiles"),
    "XLA_PROFILER_PYTHON_TRACER": ("", "1/0: trace Python calls in profiles (default: on from Python 3.12; "
                                       "before it the tracer races torch's dispatch on other threads)"),
}

_overrides = {}


def get(name, default=None):
    """The knob's value now: an override, else the environment, else its default."""
    if name in _overrides:
        return _overrides[name]
    v = os.environ.get(name)
    if v is None:
        if default is not None:
            return default
        k = KNOBS.get(name)
        return k[0] if k is not None else None
    return v


def flag(name):
    """True when the knob is set to 1/true/yes/on."""
    return str(get(name) or "").lower() in _TRUE


def integer(name, default=None):
    """The knob as an int (its default when unset, empty or malformed)."""
    v = get(name)
    try:
        return int(v)
    except (TypeError, ValueError):
        d = default if default is not None else KNOBS.get(name, ("0",))[0]
        return int(d)


def number(name):
    v = get(name)
    try:
        return float(v)
    except (TypeError, ValueError):
        return float(KNOBS[name][0])


@contextlib.contextmanager
def override(**values):
    """Replace knobs for a block: `with config.override(XLA_SAVE_TENSORS_FILE="/tmp/x"):`."""
    saved = dict(_overrides)
    _overrides.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def debug_level():
    """PT_XLA_DEBUG_LEVEL as an int (PT_XLA_DEBUG=1 means every level)."""
    v = str(get("PT_XLA_DEBUG_LEVEL") or "").strip()
    if v:
        try:
            return int(v)
        except ValueError:
            return 0
    return 100 if flag("PT_XLA_DEBUG") else 0


def records_sources():
    """IR nodes remember the user's line (read once, at import, by ir)."""
    return debug_level() >= 1 or flag("XLA_IR_DEBUG") or flag("XLA_HLO_DEBUG")


# JAX writes into os.environ: TF_CPP_MIN_LOG_LEVEL when imported, TPU_SKIP_MDS_QUERY when
# its backend starts on a machine without TPU chips. A user's environment must not change
# because torch_xla was imported or started (Lightning's tests fail on leaked variables),
# so what was there before JAX came is put back; JAX's quiet log level still holds while
# the backend starts (jax_env_during_start).
_JAX_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TPU_SKIP_MDS_QUERY")
_jax_env = None if "jax" in sys.modules else {k: os.environ.get(k) for k in _JAX_ENV}


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
