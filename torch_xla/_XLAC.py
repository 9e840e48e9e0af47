"""Stand-in for upstream's C++ extension module: the private entry points
scripts and libraries call (graph dumps, metrics, sync helpers, eager mode)."""

import torch

from .engine import api as _api


def _xla_sync_multi(tensors, devices=None, wait=True, sync_xla_data=True):
    _api.sync(list(tensors), wait=wait)


def _xla_get_default_device():
    return f"xla:{_api.default_device_index()}"


def _xla_get_all_devices():
    """Every device of the job, as runtime names ('CPU:0', 'CPU:1', ...)."""
    from . import runtime as xr
    return [f"{_api.device_type().upper()}:{i}" for i in range(xr.global_device_count())]


def _xla_set_default_device(device):
    index = int(str(device).rpartition(":")[2] or 0)
    _api.check_device_index(f"xla:{index}")
    _api.set_default_device(index)


def _xla_real_devices(devices):
    """The runtime devices behind torch devices: ['xla:0'] -> ['CPU:0'] (the
    platform in upper case, and this process's device index)."""
    out = []
    for d in devices:
        index = int(str(d).rpartition(":")[2] or 0)
        out.append(f"{_api.device_type().upper()}:{index}")
    return out


def _get_xla_tensor_dimension_size(t, dim):
    """The size of `t`'s dimension `dim`, as upstream returns it: a 0-dim int32
    tensor on t's device (shapes are static here, so it is a constant)."""
    return torch.tensor(t.shape[dim], dtype=torch.int32, device=t.device)


# -- graph dumps ---------------------------------------------------------------

def _get_xla_tensors_text(tensors):
    """IR text of the graph computing `tensors` (upstream's `IR { ... }` format)."""
    return _api.graph_text(list(tensors), "text")


def _get_xla_tensors_dot(tensors):
    """The same graph in Graphviz DOT."""
    return _api.graph_text(list(tensors), "dot")


def _get_xla_tensors_hlo(tensors):
    """HLO text (before XLA's optimisations) of the graph computing `tensors`."""
    return _api.graph_text(list(tensors), "hlo")


def _get_stablehlo(tensors, device=None, devices=None, emit_bytecode=False):
    t = list(tensors) if tensors else None
    if emit_bytecode:
        return _api.stablehlo_bytecode(t)
    return _api.stablehlo_text(t)


def _get_graph_hash(tensors):
    """A hash of the graph computing `tensors` (equal graphs share executables)."""
    return _api.graph_hash(list(tensors))


def graph_dump_hash(h):
    return _api.hash_str(h)


# -- metrics -------------------------------------------------------------------

def _xla_metrics_report():
    from .debug import metrics
    return metrics.metrics_report()


def _xla_increment_counter(name, value):
    """Add `value` to counter `name` (made when it does not exist yet)."""
    _api.metrics.add_counts(((str(name), int(value)),))


def _short_xla_metrics_report(counter_names, metric_names):
    from .debug import metrics
    return metrics.short_metrics_report(counter_names, metric_names)


def _xla_counter_names():
    from .debug import metrics
    return metrics.counter_names()


def _xla_counter_value(name):
    from .debug import metrics
    return metrics.counter_value(name)


def _xla_metric_names():
    from .debug import metrics
    return metrics.metric_names()


def _xla_metric_data(name):
    from .debug import metrics
    return metrics.metric_data(name)


def _clear_xla_counters():
    from .debug import metrics
    metrics.clear_counters()


def _clear_xla_metrics():
    from .debug import metrics
    metrics.clear_metrics()


def _get_executed_fallback_ops():
    from .debug import metrics
    return metrics.executed_fallback_ops()


# -- eager mode, execution guard -------------------------------------------------

def _set_use_eager_mode(enable):
    from .experimental import eager
    eager.eager_mode(enable)


def _get_use_eager_mode():
    from .experimental import eager
    return eager.is_eager_mode()


def _set_allow_execution(allow):
    _api.set_allow_execution(allow)


def _get_allow_execution():
    return _api.allow_execution()


def _init_env():
    _api.start()


def _xla_runtime_is_initialized():
    return _api.is_initialized()


# -- JAX interop (xla_builder.call_jax, op registry) -----------------------------

def _xla_tensor_to_jax(t):
    """The jax.Array holding XLA tensor `t`'s value, in its device storage type
    (runs `t`'s pending graph first)."""
    return _api.device_array(t)


def _xla_tensor_from_jax(array, dtype=None):
    """A new XLA tensor whose device data is `array` (no copy when `array` is
    already of the storage type of `dtype`, default: the array's own dtype)."""
    if dtype is None:
        dtype = _api.JAX_TO_TORCH[array.dtype]
    st = _api.to_jax(dtype)
    if array.dtype != st:
        array = array.astype(st)
    return _api.from_device_array(array, dtype)


def _xla_torch_to_jax_dtype(dtype):
    return _api.to_jax(dtype)


# -- tensor introspection, readiness callbacks -------------------------------------

def _xla_shape_text(shape, dtype):
    from .core import xla_builder as xb
    try:
        t = xb._PT_XLA_TYPE_MAP[dtype]
    except KeyError:
        t = str(dtype).replace("torch.", "")
    return f"{t}[{','.join(str(int(s)) for s in shape)}]"


def _get_xla_tensor_shape_type(tensor):
    """The XLA element type of an XLA tensor's device storage, lower case ('f16',
    'f32', 's64', 'pred'); XLA_USE_BF16 storage reports 'bf16'."""
    if not _api.is_xla_tensor(tensor):
        raise RuntimeError(f"_get_xla_tensor_shape_type: expected an XLA tensor, got one on {tensor.device}")
    text = _api.xla_shape_text((), _api.to_jax(tensor.dtype))
    return text[:text.index("[")]


def _get_xla_tensor_debug_info(tensor):
    """Upstream's debug text of an XLA tensor: its IR value (pending ops, or the
    `xla::device_data` leaf of data that joined IR or carries a sharding), its
    device data, and its value on the host (SPMD mode keeps a tensor moved to the
    device there until a sharding or a graph needs it). In SPMD mode the device
    is upstream's virtual `SPMD:0`, and unsharded data is its replicated value
    (one buffer here: programs that need it on every device replicate it)."""
    if not _api.is_xla_tensor(tensor):
        return "Not a XLATensor\n"
    node = _api.value_node(tensor)
    spmd = _api.topology.spmd_enabled()
    device = "SPMD:0" if spmd else "xla:0"
    shape_text = _xla_shape_text(tuple(tensor.shape), tensor.dtype)
    spec = _api.sharding_spec_string(tensor) or "None"
    lines = ["XLATensor {", f"TensorID: {id(tensor)}", f"Device: {device}",
             f"XLA Shape: {shape_text}", f"ShardingSpec: {spec}"]
    on_host = _api.held_on_host(node)
    is_data = _api.is_data_node(node)
    if _api.is_pending_node(node):
        lines.append(f"IR: [] {_api.op_name(node.entry)}, xla_shape={shape_text}")
    elif is_data and not on_host and (_api.uploaded_for_ir(node) or (spmd and spec != "None")):
        lines.append(f"IR: [] xla::device_data, xla_shape={shape_text}, device={device}")
    else:
        lines.append("IR: None")
    data = node.data if is_data and not on_host else None
    devices = getattr(getattr(data, "sharding", None), "device_set", ())
    if on_host:
        lines.append("XLAData: None")
    elif len(devices) > 1 or (spmd and data is not None):   # upstream's sharded data of the SPMD device
        lines += ["XLAShardedData: ", "  Data Device: SPMD:0", f"  Data Shape: {shape_text}",
                  f"  OpSharding: {spec if spec != 'None' else '{replicated}'}", f"  NumShards: {len(devices)}"]
    elif data is not None:
        lines += ["XLAData: ", f"  Data Device: {_xla_get_default_device()}",
                  f"  Data Shape: {shape_text}", f"  Data Handle: {id(data)}"]
    elif is_data:   # a donated buffer, or a placeholder
        lines += ["XLAData: ", f"  Data Device: {_xla_get_default_device()}",
                  f"  Data Shape: {shape_text}", "  Data Handle: Deleted"]
    else:
        lines.append("XLAData: None")
    size = "[" + ", ".join(str(int(d)) for d in tensor.shape) + "]"
    lines += [f"Tensor on host: with size {size}" if on_host else "Tensor on host: None", "}"]
    return "\n".join(lines) + "\n"


def _on_ready_callback(tensor, callback):
    """Call `callback()` on a helper thread once `tensor`'s device buffer is
    ready (its pending ops, if any, are run first)."""
    import threading
    array = _api.device_array(tensor)

    def wait():
        array.block_until_ready()
        callback()
    threading.Thread(target=wait, daemon=True).start()


# -- matmul precision --------------------------------------------------------------

_mat_mul_precision = "default"


def _xla_set_mat_mul_precision(precision):
    """'default' | 'high' | 'highest': the precision of float32 matmuls and
    convolutions in graphs compiled from now on (JAX's default_matmul_precision;
    the CPU always computes them in float32)."""
    global _mat_mul_precision
    if precision not in ("default", "high", "highest"):
        raise ValueError(f"Invalid precision: {precision!r} (expected 'default', 'high' or 'highest')")
    import jax
    jax.config.update("jax_default_matmul_precision", precision)
    _mat_mul_precision = precision


def _xla_get_mat_mul_precision():
    return _mat_mul_precision


def _xla_user_computation(opname, inputs, computation):
    """Run an `xla_builder.Computation` on XLA tensors; a list of result tensors.
    Eager, like `xla_builder.call_jax` (not a node of the lazy graph)."""
    inputs = list(inputs)
    if not inputs:
        raise RuntimeError(f"user_computation({opname}): expected at least 1 input tensor.")
    from .core import xla_builder as xb
    out = xb.call_jax(computation.jax_function(), inputs, name=opname)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _init_computation_client():
    """Bring the runtime (the JAX backend of PJRT_DEVICE) up now."""
    _api.jax_device()
# -- SPMD ------------------------------------------------------------------------

def _get_xla_sharding_spec(t):
    """t's sharding in upstream's text ('{devices=[4,1]0,1,2,3}', '{replicated}', ...),
    '' when t is not sharded. An XLAShardedTensor answers for its global tensor."""
    return _api.sharding_spec_string(getattr(t, "global_tensor", t))


def _get_xla_sharding_type(t):
    """upstream's ShardingType number of t's sharding, or None."""
    return _api.sharding_type(t)


def _xla_get_spmd_config_is_locked():
    return _api.topology.is_locked()


def _xla_clear_sharding(t):
    _api.clear_sharding(t)


def _get_xla_op_sharding(t):
    """t's sharding (an opaque object that _xla_mark_sharding accepts), or None."""
    return _api.current_sharding(t)


def _xla_mark_sharding(t, sharding):
    _api.mark_sharding(t, sharding)


def _xla_dot_general(lhs, rhs, dimension_numbers, precision_config=None, preferred_element_type=None):
    """XLA's DotGeneral: `dimension_numbers` is ((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch)), each a list of dims (an empty tuple: none); the
    result's dtype is `preferred_element_type` when given."""
    import jax
    if precision_config is not None:
        raise RuntimeError("_xla_dot_general: precision_config is not supported; the default precision applies")
    dims = []
    for i, part in enumerate(tuple(dimension_numbers)):
        if not isinstance(part, tuple) or len(part) not in (0, 2):
            raise RuntimeError(f"_xla_dot_general: dimension_numbers[{i}] must be a tuple of two lists "
                               f"(lhs and rhs dims) or an empty tuple, got {part!r}")
        pair = [list(d) for d in part] if part else [[], []]
        if not all(isinstance(x, int) for d in pair for x in d):
            raise RuntimeError(f"_xla_dot_general: dimension_numbers[{i}] must hold lists of integers, got {part!r}")
        dims.append((tuple(pair[0]), tuple(pair[1])))
    if len(dims) != 2:
        raise RuntimeError("_xla_dot_general: dimension_numbers must be a tuple of 2 elements "
                           "(contracting dims, batch dims)")
    kw = {"dimension_numbers": tuple(dims)}
    if preferred_element_type is not None:
        kw["preferred_element_type"] = _api.to_jax(preferred_element_type)
    from .core import xla_builder
    return xla_builder.call_jax(jax.lax.dot_general, (lhs, rhs), kw, name="xla_dot_general")


def _spmd_full_to_shard_shape(t):
    """A manually sharded tensor of one shard's shape: on each device, that
    device's shard of sharded tensor t (SPMDFullToShardShape)."""
    return _api.full_to_shard(t)


def _spmd_shard_to_full_shape(t, sharding, full_shape, dtype):
    """The tensor of `full_shape` laid out as `sharding` (Mesh.get_op_sharding)
    whose shards are manual tensor t's values (SPMDShardToFullShape)."""
    out = _api.shard_to_full(t, getattr(sharding, "sharding", sharding), full_shape)
    return out if dtype is None or out.dtype == dtype else out.to(dtype)


def _mark_manual_sharding(t, sharding=None):
    """Mark pending tensor t manual: each device's copy becomes its own value."""
    _api.mark_manual(t)


# -- distributed runtime and preemption ------------------------------------------

def _ensure_xla_coordinator_initialized(global_rank, world_size, master_addr, master_port=None):
    """Upstream starts its coordination service here. The job's runtime (jax.distributed)
    is joined by the launcher or the first collective, so a one-process job needs
    nothing; a mismatch with the running job is an error."""
    import torch_xla.runtime as xr
    if int(world_size) != xr.world_size() and xr.world_size() > 1:
        raise RuntimeError(f"_ensure_xla_coordinator_initialized: world_size={world_size}, but this job has "
                           f"{xr.world_size()} processes")


class _Preemption:
    """SIGTERM noticed by the preemption sync manager (per process)."""
    previous = None
    noticed = False


def _activate_preemption_sync_manager():
    """From now on a SIGTERM is recorded instead of ending the process: the training
    loop asks `_sync_point_reached(step)` and checkpoints before exiting."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread() or _Preemption.previous is not None:
        return

    def on_sigterm(signum, frame):
        _Preemption.noticed = True
    _Preemption.previous = signal.signal(signal.SIGTERM, on_sigterm)


def _deactivate_preemption_sync_manager():
    import signal
    if _Preemption.previous is not None:
        signal.signal(signal.SIGTERM, _Preemption.previous)
    _Preemption.previous = None
    _Preemption.noticed = False


def _sync_point_reached(step):
    """True once a SIGTERM arrived while the preemption sync manager was active."""
    return _Preemption.noticed


# -- placeholders ------------------------------------------------------------------

def _is_placecholder(t):   # upstream's spelling
    """True for a tensor made by xla_builder.create_placeholder_tensor (no data)."""
    return _api.is_placeholder(t)


def _get_tensors_handle(tensors):
    """An opaque handle per tensor, distinct for distinct device data (placeholders
    included): the identity of the data leaf each reads."""
    return [_api.data_handle(t) for t in tensors]


# -- graphs kept by hash: what upstream's dynamo bridge is built from --------------

def _xla_get_tensor_id(t):
    """A unique id of XLA tensor t, stable for its life."""
    return _api.tensor_id(t)


def _get_tensors_xla_device_data_node(tensors):
    """-> (tensor ids, tensors) of the device data the graph of `tensors` reads."""
    return _api.graph_input_data(tensors)


def _xla_warm_up_cache(tensors, devices):
    """Compile, without running, the graph of `tensors`' pending values; it is
    kept under `_get_graph_hash(tensors)` for `_run_cached_graph`."""
    _api.warm_up_cache(tensors)


def _run_cached_graph(graph_hash, tensors):
    """Run the warmed-up graph `graph_hash` with `tensors` as its inputs, in the
    order `_get_tensors_xla_device_data_node` lists them; -> its outputs."""
    return _api.run_cached_graph(graph_hash, tensors)


def _get_seed_info_id():
    return _api.seed_info_id()


def _get_base_seed_as_tensor(device=None):
    """The device generator's current seed as an int64 XLA tensor."""
    import torch
    return torch.tensor(_api.rng_seed(), dtype=torch.int64).to(device or "xla")


def _check_tensor_need_materialization(tensors):
    """For each tensor: whether reading it would run a graph."""
    return [_api.needs_materialization(t) for t in tensors]


def _clear_pending_irs(device=None):
    """Drop the pending IR of every live tensor: each becomes a placeholder that
    cannot be read until it is written again, and the next barrier runs nothing."""
    _api.clear_pending_irs()


# -- explicit buffer donors ------------------------------------------------------

def _set_buffer_donation(t, should_donate):
    """Mark (or unmark) XLA tensor t's buffer as a donor; False when t holds no
    buffer (pending IR)."""
    return _api.set_buffer_donation(t, should_donate)


def _get_buffer_donation(t):
    return _api.get_buffer_donation(t)


def _xla_set_enable_alias_with_buffer_donor_config(flag):
    _api.set_alias_with_buffer_donor(flag)


def _xla_get_enable_alias_with_buffer_donor_config():
    return _api.alias_with_buffer_donor()


def _global_tensor_from_cpu_shards(shards, op_sharding, global_shape=None):
    """A sharded XLA tensor assembled from one CPU shard per device (in device
    order) laid out as `op_sharding` (from Mesh.get_op_sharding); `global_shape`
    may cut off trailing padding. RuntimeError when they do not fit together."""
    return _api.from_cpu_shards(shards, op_sharding.sharding, op_sharding.ndim, global_shape)


_registered = []


def _init_xla_lazy_backend():
    """Register the XLA lazy backend with PyTorch (once per process; a second
    call does nothing, as upstream's RegisterXLAFunctions counter shows)."""
    if not _registered:
        _registered.append(True)
        _api.metrics.counter("RegisterXLAFunctions")


def _get_git_revs():
    """The revisions this build comes from: {'xla': ..., 'torch': ...}."""
    from .version import __version__
    return {"xla": __version__, "torch": torch.__version__}


def _unsafe_buffer_pointer(t):
    """The address of the device buffer behind an XLA tensor (its pending
    graph runs first)."""
    arr = _api.stored_array(t)   # the buffer itself (padded shards under an uneven layout)
    arr.block_until_ready()
    shards = getattr(arr, "addressable_shards", None)
    if shards:
        arr = shards[0].data
    return int(arr.unsafe_buffer_pointer())


def _xla_tensors_from_aten(tensors, devices):
    """CPU tensors copied to the given XLA devices (one device string each)."""
    if len(tensors) != len(devices):
        raise ValueError(f"_xla_tensors_from_aten: {len(tensors)} tensors but {len(devices)} devices")
    return [t.to(torch.device(d)) for t, d in zip(tensors, devices)]


def _xla_tensors_report(nodes_threshold=100, device=""):
    """The IR of each live XLA tensor with more than `nodes_threshold` nodes,
    with the user frame of its latest op when XLA_IR_DEBUG / XLA_HLO_DEBUG is on."""
    return _api.tensors_report(nodes_threshold, device)


def _get_ir_debug():
    """Whether IR nodes record the user's frames (XLA_IR_DEBUG, read at import)."""
    return _api.config.records_sources()


def _set_ir_debug(enable):
    if bool(enable) != _get_ir_debug():
        raise NotImplementedError(
            "torch_xla: IR debug information is chosen at import (XLA_IR_DEBUG=1 or XLA_HLO_DEBUG=1 "
            "before `import torch_xla`); it cannot be switched in a running process")


# -- lowering: upstream's `torch_xla._XLAC.lowering` submodule ---------------------

class LoweringContext:
    """The graph computing some XLA tensors lowered to an HLO module, without
    running it: `build(tensors)`, then `hlo()` (a serialized HloModuleProto),
    `hlo_text()` (its protobuf text format), `hlo_json()`, and the tensors that
    feed its parameters."""

    def __init__(self, name="PyLoweringContext"):
        self._ctx = _api.lowering_context(name)

    def build(self, tensors):
        self._ctx.build(list(tensors))

    def buildforiloop(self, tensors, additional_inputs_list=()):
        raise NotImplementedError(
            "LoweringContext.buildforiloop: while-loop bodies are not built from HLO here; "
            "torch_xla.experimental.fori_loop / while_loop trace their bodies directly")

    def hlo(self):
        return self._ctx.hlo()

    def hlo_text(self):
        return self._ctx.hlo_text()

    def hlo_json(self):
        return self._ctx.hlo_json()

    def parameter_id_tensor_mapping(self):
        return self._ctx.parameter_id_tensor_mapping()

    def device_parameter_id_tensor_mapping(self):
        return self._ctx.device_parameter_id_tensor_mapping()

    def tensor_parameter_id(self, tensor):
        return self._ctx.tensor_parameter_id(tensor)

    def set_name_string(self, name):
        self._ctx.name = str(name)

    def get_name_string(self):
        return self._ctx.name


def _lowering_module():
    import types
    m = types.ModuleType(__name__ + ".lowering", "Lowering context and utilities")
    m.LoweringContext = LoweringContext
    LoweringContext.__module__ = m.__name__
    return m


lowering = _lowering_module()


def _xla_op_computation_from_module_proto(name, module_proto):
    from .core import xla_builder as xb
    return xb.computation_from_module_proto(name, module_proto)


def _xla_computation_text(computation):
    from .core import xla_builder as xb
    return xb.get_computation_hlo(computation)
