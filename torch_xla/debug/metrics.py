"""torch_xla.debug.metrics: counters and metrics with upstream's names and text format."""
from ..engine import metrics as _m


def metrics_report():
    """The full report: every non-zero metric, then every non-zero counter."""
    return _m.report()


def short_metrics_report(counter_names=None, metric_names=None):
    """A short report of the key metrics and counters, plus every aten::* fallback counter."""
    if not counter_names:
        counter_names = ["CachedCompile", "MarkStep"]
    if not metric_names:
        metric_names = ["CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime"]
    counters = set(counter_names) | {n for n in _m.counters if n.startswith("aten::")}
    return _m.report(metric_names=set(metric_names), counter_names=counters)


def counter_names():
    """Names of the counters that are non-zero."""
    return [n for n, v in _m.counters.items() if v]


def counter_value(name):
    """A counter's value, or None when it is zero or unknown."""
    v = _m.counters.get(name)
    return v if v else None


def metric_names():
    """Names of the metrics that have samples."""
    return [n for n, m in _m.metrics.items() if m.total]


def metric_data(name):
    """(total samples, accumulator, ((timestamp_ns, value), ...)) or None."""
    m = _m.metrics.get(name)
    if m is None or not m.total:
        return None
    return m.total, m.acc, tuple(m.ordered_samples())


def executed_fallback_ops():
    """The aten ops that ran on the CPU fallback."""
    return [n for n, v in _m.counters.items() if v and n.startswith("aten::")]


def clear_counters():
    _m.clear_counters()


def clear_metrics():
    _m.clear_metrics()


def clear_all():
    """Reset every counter and metric."""
    _m.clear_counters()
    _m.clear_metrics()
