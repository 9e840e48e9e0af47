"""Stand-in for upstream's C++ extension module: the private entry points
scripts and libraries call (graph dumps, metrics, sync helpers, eager mode)."""


from .engine import api as _api


def _xla_sync_multi(tensors, devices=None, wait=True, sync_xla_data=True):
    _api.sync(list(tensors), wait=wait)


def _xla_get_default_device():
    return "xla:0"


def _get_xla_tensor_dimension_size(t, dim):
    return t.shape[dim]


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


# -- SPMD ------------------------------------------------------------------------

def _get_xla_sharding_spec(t):
    """t's sharding in upstream's text ('{devices=[4,1]0,1,2,3}', '{replicated}', ...),
    '' when t is not sharded."""
    return _api.sharding_spec_string(t)


def _get_xla_sharding_type(t):
    """upstream's ShardingType number of t's sharding, or None."""
    return _api.sharding_type(t)


def _xla_get_spmd_config_is_locked():
    return _api.topology.is_locked()


def _xla_clear_sharding(t):
    _api.clear_sharding(t)
