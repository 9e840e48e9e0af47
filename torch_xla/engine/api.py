"""The engine's surface: everything the public torch_xla modules use, and the
one start-up function. Public modules import this module and nothing else of
the engine (tests/test_layering.py checks it).

Upstream's C++ `_XLAC` plays this role there: sync, graph capture and
hashing, tensor introspection, the runtime's facts, the device generator.
"""
import gc

from .base import config, events, frames, metrics  # noqa: F401  (re-exported)
from .base.dtypes import JAX_TO_TORCH, NATURAL, storage_array, to_jax, torch_to_numpy  # noqa: F401
from .ir.graph import op_name  # noqa: F401
from .ir.graph import xla_shape as xla_shape_text  # noqa: F401
from .compile import persistent as _persistent
from .compile import cache as _cache
from .ir import node as _node
from .ir.graph import Graph
from .lazy import executor as _executor
from .lazy import host as _host
from .lazy import launch as _launch
from .lazy import mode as _mode
from .lazy import state as _state
from .lazy.handlers import random as _random
from .observe import debug as _debug
from .observe import spmd_report as _spmd_report
from .observe import graph_dump as _dump
from .observe import vlog as _vlog
from .ops import collectives as collective_ops  # noqa: F401  (the collective op descriptors)
from .runtime import distributed  # noqa: F401  (joining a multi-process job)
from .runtime import topology  # noqa: F401
from .runtime.platform import device_type, is_initialized, jax_device, jax_platform  # noqa: F401

_started = []


def start():
    """Compose the engine once: the `xla` device, the rules and handlers, the
    compile strategies, the observers; then the start-up switches."""
    if _started:
        return
    _started.append(True)
    from .lazy import device
    device.register()   # the `xla` name must belong to PrivateUse1 before torch.device("xla")
    from . import ops  # noqa: F401  (lowering rules)
    from .lazy import dispatch, transfers, handlers  # noqa: F401  (tensor-level handlers)
    from .compile import job  # noqa: F401  (the multi-process strategy and its watchdog)
    from .compile import spmd  # noqa: F401  (the SPMD strategy)
    _debug.install()
    _spmd_report.install()
    _vlog.install()
    from .lazy import donation
    donation.register_op()
    _persistent.from_env()
    if config.read("XLA_USE_EAGER_DEBUG_MODE"):
        set_eager_mode(True)
    _raise_gc_threshold(config.read("XLA_GC_GEN0_THRESHOLD"))


def _raise_gc_threshold(at_least):
    """Python's collector runs its first generation every 700 net new objects,
    moving the survivors on; a traced step's IR survives until its barrier, so
    a big step (a 12-layer transformer: ~10,000 live objects) paid a dozen young
    collections and, every few steps, a full one over torch's and JAX's heap
    (0.2 s on a 2-core machine): a fifth of its time and more. Only ever raised, so
    a threshold the user set higher stays; cyclic garbage is still collected,
    later."""
    threshold = gc.get_threshold()
    if at_least > threshold[0]:
        gc.set_threshold(at_least, *threshold[1:])


# -- barriers and execution ----------------------------------------------------

def sync(tensors=None, wait=False, reason="user", donate_marked=False):
    """Run pending IR: of `tensors`, or of every live tensor (a full barrier).
    donate_marked: a partial sync donates buffers marked as donors too."""
    return _executor.sync(tensors, wait=wait, reason=reason, donate_marked=donate_marked)


def full_barriers():
    """(how many full barriers (mark_step, sync of every live tensor) have run,
    how many of them ran pending work)."""
    return tuple(_executor.full_barriers)


def watch_outputs(tensors):
    """Watch the device data XLA tensors hold now until the next full barrier."""
    _executor.watch_values([_state.value_of(t) for t in tensors])


def barrier_read_watched(number):
    """Whether full barrier `number` (as full_barriers() counted it) ran a graph
    that read data watched (watch_outputs) since the barrier before it."""
    return _executor.barrier_read_watched(number)


def wait_device_ops():
    _executor.wait_device_ops()


def push_scope(name):
    return frames.push_scope(name)


def pop_scope(full):
    frames.pop_scope(full)


def reset_scopes():
    frames.reset_scopes()


def add_step_closure(fn, args=()):
    _executor.step_closures.append((fn, args))


def run_step_closures():
    _executor.run_step_closures()


def last_graph_info():
    return dict(_launch.last_graph_info)


def compiled_graph_count():
    """Executables in the in-memory cache."""
    return _cache.size()


# -- graphs ----------------------------------------------------------------------

def capture(tensors=None):
    """The Graph computing `tensors` (None: every pending tensor); nothing runs."""
    return Graph.capture(_executor.pending_roots(None if tensors is None else list(tensors)))


def graph_hash(tensors):
    """Upstream's graph hash text of the graph computing `tensors` (with
    alias_with_buffer_donor_config on, its marked donors are part of it)."""
    from .lazy import donation
    g = capture(tensors)
    if donation.enabled():
        marked = donation.marked_params(g)
        if marked:
            g.donate(marked)
    return _debug.hash_str(hash(g.key))


def data_handle(t):
    """An opaque handle of the device data t reads (its data leaf's identity);
    RuntimeError when that buffer was donated to a graph that ran."""
    from .lazy import donation
    if not is_xla_tensor(t):
        raise RuntimeError("_get_tensors_handle: not an XLA tensor")
    v = _state.base_of(t).value
    if donation.is_consumed(v[0]):
        raise RuntimeError(f"torch_xla: the buffer of this tensor (shape {list(t.shape)}) is deleted: "
                           "it was donated to a graph that already ran")
    return id(v[0])


def from_cpu_shards(shards, sharding, ndim, global_shape=None):
    """An SPMD tensor assembled from one CPU shard per device (global ordinal order)."""
    from .lazy.handlers import sharding as _sh
    return _sh.from_cpu_shards(shards, sharding, ndim, global_shape)


def set_buffer_donation(t, should_donate):
    from .lazy import donation
    return donation.set_donation(t, should_donate)


def get_buffer_donation(t):
    from .lazy import donation
    return donation.get_donation(t)


def set_alias_with_buffer_donor(flag):
    from .lazy import donation
    donation.set_enabled(flag)


def alias_with_buffer_donor():
    from .lazy import donation
    return donation.enabled()


def hash_str(h):
    return _debug.hash_str(h)


def graph_text(tensors, fmt="text"):
    """The graph computing `tensors` as IR text, DOT, HLO or StableHLO."""
    g = capture(tensors)
    return {"text": _dump.to_text, "dot": _dump.to_dot, "hlo": _dump.to_hlo,
            "stablehlo": _dump.to_stablehlo}[fmt](g)


def lowering_context(name="PyLoweringContext"):
    """Upstream's Python LoweringContext: build(tensors), then hlo() (a serialized
    HloModuleProto), hlo_text(), hlo_json() and the parameters' tensors."""
    from .observe.lowering import ModuleLowering
    return ModuleLowering(name)


def hlo_module_text(proto):
    """HLO text of a serialized HloModuleProto (upstream's spelling)."""
    return _dump.module_proto_hlo(proto)


def hlo_module_program_shape(proto):
    """([(shape, jax dtype)] of the parameters, the same of the results) of a
    serialized HloModuleProto."""
    from .observe import hlo_proto
    return hlo_proto.program_shape(proto)


def stablehlo_text(tensors=None):
    return _dump.stablehlo_text(tensors)


def stablehlo_bytecode(tensors=None):
    return _dump.stablehlo_bytecode(tensors)


def op_trace(tensors=None):
    """(key, op lines) of the graph computing `tensors` (None: every pending
    tensor), for torch_xla.compile's limit on different graphs."""
    return _dump.op_trace(_executor.pending_roots(None if tensors is None else list(tensors)))


def tensors_report(nodes_threshold=100, device=""):
    """Upstream's _xla_tensors_report: the IR of every live XLA tensor (on
    `device`, when given) with more than `nodes_threshold` nodes."""
    from .lazy import tensor as _t
    want = str(device) if device else None
    pairs = []
    for t in _t.live_tensors():
        if want is not None and str(t.device) != want:
            continue
        try:
            pairs.append((t, _state.value_of(t)))
        except Exception:  # noqa: BLE001  (a tensor mid-construction or donated)
            continue
    return _dump.tensors_report(pairs, nodes_threshold)


def explain_recompilations(last=None):
    return _debug.explain_recompilations(last)


# -- trace mode ------------------------------------------------------------------

def set_eager_mode(enable):
    from .lazy import eager
    eager.set_eager(enable)


def is_eager_mode():
    return _mode.is_eager()


def enter_compile(full_graph):
    """torch_xla.compile: lazy inside, and no execution at all with full_graph."""
    return _mode.enter_compile(full_graph)


def exit_compile(saved):
    _mode.exit_compile(saved)


def lazy_region_enter():
    prev = _mode.state.lazy_region
    _mode.state.lazy_region = True
    return prev


def lazy_region_exit(prev):
    _mode.state.lazy_region = prev


def set_allow_execution(allow):
    _mode.set_allow_execution(allow)


def allow_execution():
    return _mode.allow_execution()


# -- tensors -----------------------------------------------------------------------

def tensor_class():
    """XLATensor, the class of every tensor on the `xla` device."""
    from .lazy.tensor import XLATensor
    return XLATensor


def default_device_index():
    """The index of the device a bare `xla` names."""
    return topology.default_device_index()


def set_default_device(index):
    """Make xla:<index> the device a bare `xla` names."""
    from .lazy import device_groups
    device_groups.set_default(int(index))


def addressable_device_count():
    """XLA devices this process addresses (xla:0..xla:N-1)."""
    return topology.addressable_device_count()


def check_device_index(device):
    """IndexError (also a ValueError) unless this process addresses `device`."""
    from .lazy.device_groups import check_index
    check_index(device)


def is_xla_tensor(t):
    from .lazy.tensor import XLATensor
    return isinstance(t, XLATensor)


def upload(cpu, device=None):
    """A device tensor holding `cpu`'s values, made without recording IR (safe on a
    loader thread); `device` an XLA device of this process (default: the default one)."""
    from .lazy import device_groups, tensor, transfers
    index = None
    if device is not None:
        check_device_index(device)
        index = device_groups.resolve(device)
    node = transfers.upload_node(cpu, index)
    return tensor.new_base((node, 0), (tuple(cpu.shape), cpu.dtype),
                           None if index is None else device_groups.xla_device(index))


def storage_numpy(cpu):
    """The numpy array the device stores for CPU tensor `cpu` (the engine's dtype rules)."""
    return storage_array(torch_to_numpy(cpu.detach().contiguous()), cpu.dtype)


def from_device_array(arr, dtype):
    """A base tensor over a jax.Array (DLPack and JAX interop)."""
    from .lazy import tensor
    shape = tuple(arr.shape)
    return tensor.new_base((_node.data_node(arr, shape, dtype), 0), (shape, dtype))


def device_array(t):
    """The jax.Array behind an XLA tensor (runs its pending graph)."""
    from .lazy.transfers import device_array as _da
    return _da(t)


def stored_array(t):
    """The jax.Array an XLA tensor's value is held in: padded under an uneven
    SPMD layout (each device its padded shard), else the value itself."""
    from .lazy.transfers import stored_array as _sa
    return _sa(t)


def value_node(t):
    """The IR node holding an XLA tensor's current value (views re-derived)."""
    return _state.value_of(t)[0]


def is_pending_node(node):
    return node.kind == _node.OP


def is_data_node(node):
    return node.kind == _node.DATA


def held_on_host(node):
    """Whether data leaf `node` still holds its value on the host (SPMD mode keeps
    a tensor moved to the device there until a sharding or a graph needs it)."""
    return _host.is_held(node)


def uploaded_for_ir(node):
    """Whether data leaf `node` was held on the host and uploaded for its first use in IR."""
    return _host.was_held(node)


def export_array(t):
    """The jax.Array of an XLA tensor's value in its PyTorch dtype (DLPack export)."""
    from .lazy.tensor import export_array
    return export_array(t)


def trace_collective(info, args, kwargs):
    """Record one collective op node on XLA tensors; -> its output tensors."""
    from .lazy.tracing import trace_node, wrap
    node, e = trace_node(info, args, kwargs)
    return wrap(node, e)


def assign(t, value_tensor):
    """Write `value_tensor`'s value into `t` in place (views scatter into their base)."""
    from .lazy.views import assign as _assign
    _assign(t, _state.value_of(value_tensor))


def optimization_barrier_(tensors):
    """One lax.optimization_barrier over the XLA tensors of `tensors`, in place."""
    from .lazy.handlers.barrier import optimization_barrier_ as _barrier
    _barrier(tensors)


def adam_update(*args, **kwargs):
    """One masked Adam/AdamW parameter update on the device (sync-free optimizers)."""
    from .lazy.handlers.optim import adam_update as _adam
    return _adam(*args, **kwargs)


def sgd_update(*args, **kwargs):
    """One masked SGD parameter update on the device (sync-free optimizers)."""
    from .lazy.handlers.optim import sgd_update as _sgd
    return _sgd(*args, **kwargs)


def rng_state():
    """The device generator (its `seed`), for code that must replay random ops."""
    return _random.rng


# -- random ------------------------------------------------------------------------

def manual_seed(seed):
    _random.manual_seed(seed)


def rng_seed():
    return _random.rng.seed


# -- runtime -------------------------------------------------------------------------

def initialize_cache(path, readonly=False):
    _persistent.initialize(path, readonly)


def memory_stats():
    return jax_device().memory_stats() or {}


# -- captured steps (torch.compile's openxla backend, torch_xla.compile replay) --------

def capture_step(fn, args):
    """Trace fn(*args) once lazily and capture it as a replayable step;
    -> (step, outputs). `step.replayable`, `step.why`, `step.run(args)`."""
    from .lazy.replay import Step
    return Step.capture(fn, args)


def capture_graph(fn, avals, name="compiled graph"):
    """Trace fn(*tensors) -> list of XLA tensors once on placeholders of avals
    ((shape, dtype) pairs); -> a handle for call_graph. Raises CaptureError
    (or RuntimeError for a host read) when fn cannot be one pure node."""
    from .lazy.handlers import control_flow
    return control_flow.capture_graph(fn, avals, name)


def call_graph(handle, tensors):
    """Add one call of a captured graph to the lazy graph; -> its outputs."""
    from .lazy.handlers import control_flow
    return control_flow.call_graph(handle, tensors)


def capture_errors():
    """The exceptions capture_graph raises for a function that cannot be one node."""
    from .lazy.subgraph import CaptureError
    return (CaptureError, RuntimeError, NotImplementedError, TypeError, ValueError)


def aval_of(t):
    """XLA tensor t's (shape tuple, torch dtype)."""
    return _state.aval_of(t)


# -- graphs kept by hash (upstream's dynamo-bridge primitives) ------------------------

def tensor_id(t):
    from .lazy import cached_graphs
    return cached_graphs.tensor_id(t)


def graph_input_data(tensors):
    """-> (tensor ids, tensors) of the device data the graph of `tensors` reads."""
    from .lazy import cached_graphs
    return cached_graphs.graph_inputs(tensors)


def warm_up_cache(tensors):
    """Compile the graph of `tensors` without running it, kept under their graph hash."""
    from .lazy import cached_graphs
    tensors = [t for t in tensors if is_xla_tensor(t)]
    if tensors:
        cached_graphs.warm_up(tensors, graph_hash(tensors))


def compile_pending(tensors=None):
    """Compile without running the graph a barrier would run now (tensors=None:
    every pending tensor, with its donation) or of `tensors`; placeholders are
    inputs of the layout mark_sharding gave them. -> the compiled program
    (`memory_analysis()`, `as_text()`, `cost_analysis()`)."""
    _, exe = _executor.compile_pending(tensors)
    return exe.compiled


def hlo_collectives(hlo_text):
    """The collectives of a compiled HLO module, each counted as often as it runs
    in one execution (a loop's body times its known trip count):
    [(kind, count, bytes per device per execution)]."""
    return _spmd_report.collectives_per_run(hlo_text)


def run_cached_graph(h, tensors):
    from .lazy import cached_graphs
    return cached_graphs.run(h, tensors)


def seed_info_id():
    from .lazy import cached_graphs
    return cached_graphs.SEED_INFO_ID


def clear_pending_irs():
    from .lazy import cached_graphs
    cached_graphs.clear_pending()


def needs_materialization(t):
    """Whether XLA tensor t's value is pending IR (reading it would run a graph)."""
    if not is_xla_tensor(t):
        return False
    return _state.base_of(t).is_pending


# -- torch_xla.compile(replay=True) ------------------------------------------------------

def capture_call(fn, args, kwargs, after_trace=None):
    """torch_xla.compile(replay=True): trace fn(*args, **kwargs) lazily and
    capture the call, tensors it closes over included; -> (call step, result).
    `step.replayable`, `step.why`, `step.fingerprint`, `step.replay(flat args)` (-> (result,) or None)."""
    from .lazy.replay import capture_call as _capture_call
    return _capture_call(fn, args, kwargs, after_trace)


def view_alias_id(t):
    """Upstream's _xla_get_tensor_view_alias_id: 0 for a tensor that is not a
    view, else an id its base's storage shares with every view of it."""
    s = t._lazy
    return 0 if type(s) is _state.Base else id(s.base)


def has_pending_ir(t):
    """True when XLA tensor t's value (its base's, for a view) is still pending IR."""
    return _state.base_of(t).is_pending


def on_dynamo_import(hook):
    """Run hook() once torch._dynamo is imported (at once if it is already):
    pieces that only matter under Dynamo register without an import of their own."""
    from .lazy import tensor
    tensor.on_dynamo_import(hook)


def tensor_debug_info(t):
    """Upstream's `_get_xla_tensor_debug_info` text: 'XLAData: None' while the
    tensor's value is pending IR, the device data's shape once it is computed."""
    b = _state.base_of(t)
    node = b.value[0]
    lines = ["XLATensor {", f"TensorID: {id(b)}", f"Device: {jax_platform().upper()}:0",
             f"XLA Shape: {_dump.xla_shape(*b.aval)}"]
    if node.kind == _node.OP:
        lines += ["ValueNode: " + node.entry.name, "XLAData: None"]
    else:
        lines += ["ValueNode: None", "XLAData: ", f"  Data Shape: {_dump.xla_shape(*b.aval)}"]
    return "\n".join(lines + ["}"])


def dynamo_ready():
    """Make sure Dynamo knows XLA tensors and skips torch_xla's and JAX's
    frames (done at Dynamo's import; idempotent)."""
    from .lazy import tensor
    tensor.ensure_dynamo_registration()


# -- SPMD ----------------------------------------------------------------------------

def use_spmd():
    """Switch to SPMD mode (before any device data exists, else RuntimeError)."""
    topology.enable_spmd()


def spmd_devices():
    """The JAX devices behind the logical SPMD device, by id."""
    return topology.spmd_devices()


def mark_sharding(t, sharding):
    """Lay XLA tensor t out as the jax `sharding` (data: placed now; pending: a constraint)."""
    from .lazy.handlers import sharding as _sh
    _sh.annotate(t, sharding)


def sharding_constraint(t, sharding):
    """A new tensor: t's value under a sharding constraint."""
    from .lazy.handlers import sharding as _sh
    return _sh.constrained(t, sharding)


def clear_sharding(t):
    from .lazy.handlers import sharding as _sh
    _sh.clear(t)


def current_sharding(t):
    """t's jax sharding (annotation or sharded data), or None."""
    from .lazy.handlers import sharding as _sh
    return _sh.current_sharding(t)


def is_even_sharding(sharding, shape):
    from .lazy.handlers import sharding as _sh
    return _sh.is_even(sharding, shape)


def padded_shards(t, sharding):
    from .lazy.handlers import sharding as _sh
    return _sh.padded_shards(t, sharding)


def sharding_spec_string(t):
    from .lazy.handlers import sharding as _sh
    return _sh.spec_string(t)


def format_sharding(sharding, ndim):
    from .lazy.handlers import sharding as _sh
    return _sh.format_sharding(sharding, ndim)


def sharding_type(t):
    from .lazy.handlers import sharding as _sh
    return _sh.sharding_type(t)


def full_to_shard(t):
    """A manual tensor: each device's shard of sharded tensor t, as its own value."""
    from .lazy.handlers import sharding as _sh
    return _sh.full_to_shard(t)


def shard_to_full(t, sharding, full_shape, mark=False):
    """The global tensor whose shards are manual tensor t's per-device values
    (mark=True: t's per-device copies, when t is not manual)."""
    from .lazy.handlers import sharding as _sh
    return _sh.shard_to_full(t, sharding, full_shape, mark)


def mark_manual(t):
    from .lazy.handlers import sharding as _sh
    return _sh.mark_manual(t)
# -- control flow and JAX interop (function nodes; lazy/handlers/control_flow.py) ----

def placeholder_tensor(shape, dtype):
    """An XLA tensor of that shape and dtype with no data: it traces like device
    data (a graph parameter) but cannot be computed or read."""
    from .lazy.subgraph import placeholder
    return placeholder((tuple(shape), dtype))


def is_placeholder(t):
    """Whether t's storage is a data leaf without data (a placeholder)."""
    if not is_xla_tensor(t):
        return False
    v = _state.base_of(t).value
    return v[0].kind == _node.DATA and v[0].data is None


def scan(fn_flat, n_carry, init, xs, reverse=False, body_cache=None, remat=False):
    """One lax.scan node: fn_flat(*carry, *x_slices) -> [*carry, *y_slices]; -> (carry, ys).
    body_cache: a dict in which a pure fn's captured body is kept by avals.
    remat: the backward recomputes each iteration's forward (only carries saved)."""
    from .lazy.handlers import control_flow
    return control_flow.scan(fn_flat, n_carry, list(init), list(xs), reverse=reverse,
                             body_cache=body_cache, remat=remat)


def while_loop(cond_flat, body_flat, carried):
    """One lax.while_loop node over the XLA tensors `carried` (forward only)."""
    from .lazy.handlers import control_flow
    return control_flow.while_loop(cond_flat, body_flat, list(carried))


def call_jax(jax_fn, args, kwargs=None, name=None):
    """jax_fn as one node of the graph, differentiable through jax.vjp."""
    from .lazy.handlers import control_flow
    return control_flow.call_jax(jax_fn, args, kwargs, name)


def register_op_handler(op, fn):
    """Make `fn(*args, **kwargs)` the XLA kernel of the custom operator `op`
    (a torch.ops overload defined outside aten): XLA tensors dispatch in Python,
    so their kernel is a dispatch handler."""
    from .ops.registry import HANDLERS
    HANDLERS[op] = lambda args, kwargs: fn(*args, **kwargs)


def lowering_platform():
    """The JAX platform ('cpu', 'cuda', 'tpu') of the graph whose rules are
    running now, read by a call_jax function while it is lowered to choose a
    platform's kernel; None outside a lowering (e.g. while call_jax only
    evaluates output shapes)."""
    from .ops.context import ctx
    return ctx.platform


def pure_function(fn_flat, in_avals, seeded=False):
    """Capture fn_flat once at `in_avals`; -> a replayable handle (see apply_pure).
    `seeded`: random ops inside draw from a per-call `rng_seed`."""
    from .lazy.handlers import control_flow
    return control_flow.pure_body(fn_flat, list(in_avals), seeded=seeded)


def apply_pure(handle, tensors, rng_seed=None):
    """Replay a pure_function handle on XLA tensors as one node; -> output tensors."""
    from .lazy.handlers import control_flow
    return control_flow.apply_pure(handle, tensors, rng_seed)


def tensor_aval(t):
    """(shape tuple, torch dtype) of an XLA tensor."""
    return t._lazy.aval


def static_key(x):
    """A cache-key part for a non-tensor argument: its value when hashable, else its identity."""
    from .lazy.handlers.control_flow import static_key as _static_key
    return _static_key(x)
