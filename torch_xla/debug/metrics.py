"""torch_xla.debug.metrics: counters and metrics with upstream's names and text format.

    import torch_xla.debug.metrics as met
    print(met.metrics_report())          # every metric and counter
    print(met.short_metrics_report())    # compile/execute/transfer times, fallbacks
    met.counter_value("UncachedCompile") # None when zero

Times are nanoseconds; the report prints them as upstream does (317ms794.578us).
"""
from ..engine import api as _api

_m = _api.metrics

_SHORT_COUNTERS = ["CachedCompile", "MarkStep"]
_SHORT_METRICS = ["CompileTime", "ExecuteTime", "ExecuteReplicatedTime",
                  "TransferToDeviceTime", "TransferFromDeviceTime"]


def metrics_report():
    """The full report: every metric with samples, then every non-zero counter."""
    return _m.report()


def short_metrics_report(counter_names: list = None, metric_names: list = None):
    """A short report: the named counters and metrics (default: CachedCompile,
    MarkStep; CompileTime, ExecuteTime, ExecuteReplicatedTime,
    TransferToDeviceTime, TransferFromDeviceTime), plus every non-zero aten::*
    counter (the ops that ran on the CPU)."""
    if not counter_names:
        counter_names = _SHORT_COUNTERS
    if not metric_names:
        metric_names = _SHORT_METRICS
    return _m.short_report(list(counter_names), list(metric_names))


def counter_names():
    """Names of the counters that are non-zero."""
    _m.flush()
    return sorted(n for n, v in list(_m.counters.items()) if v)


def counter_value(name):
    """A counter's value, or None when it is zero or unknown."""
    _m.flush()
    v = _m.counters.get(name)
    return v if v else None


def metric_names():
    """Names of the metrics that have samples."""
    _m.flush()
    return sorted(n for n, m in list(_m.metrics.items()) if m.total)


def metric_data(name):
    """(total samples, accumulator, ((timestamp_ns, value), ...)) or None.

    The samples are the last XLA_METRICS_SAMPLES (1,024) ones, oldest first."""
    _m.flush()
    m = _m.metrics.get(name)
    if m is None or not m.total:
        return None
    return m.total, m.acc, tuple(m.ordered_samples())


def executed_fallback_ops():
    """The aten ops that ran on the CPU fallback, as 'aten::<name>'."""
    _m.flush()
    return sorted(n for n, v in list(_m.counters.items()) if v and n.startswith("aten::"))


def clear_counters():
    """Reset every counter to zero."""
    _m.clear_counters()


def clear_metrics():
    """Drop every metric's samples."""
    _m.clear_metrics()


def clear_all():
    """Reset every counter and metric."""
    clear_metrics()
    clear_counters()


def explain_recompilations(last=None):
    """Why graphs recompiled: for each compilation of a graph whose earlier
    version came from the same place in your code, what differs (an input's
    shape or dtype, an op that appeared or vanished, and the line behind it).
    Returns the explanations as one string ('' when nothing recompiled)."""
    return _api.explain_recompilations(last)
