"""Counters and metrics, with upstream torch_xla's names and report format.

A counter is a name -> int. A metric keeps its total sample count, the sum of
its values and the last 1,024 samples (timestamp_ns, value) for rates and
percentiles. Times are recorded in nanoseconds.
"""
import math
import os
import threading
import time

_RING = 1024
_lock = threading.Lock()
counters = {}
metrics = {}


class Metric:
    __slots__ = ("total", "acc", "samples", "pos", "repr")

    def __init__(self, repr_fn):
        self.total = 0
        self.acc = 0.0
        self.samples = []
        self.pos = 0
        self.repr = repr_fn

    def add(self, value):
        now = time.time_ns()
        self.total += 1
        self.acc += value
        if len(self.samples) < _RING:
            self.samples.append((now, value))
        else:
            self.samples[self.pos] = (now, value)
            self.pos = (self.pos + 1) % _RING

    def ordered_samples(self):
        return self.samples[self.pos:] + self.samples[:self.pos]


def format_time(ns):
    """Upstream's duration format, e.g. 317ms794.578us or 02s042ms010.001us."""
    parts = (("d", 86400e9, 2, 0), ("h", 3600e9, 2, 0), ("m", 60e9, 2, 0),
             ("s", 1e9, 2, 0), ("ms", 1e6, 3, 0), ("us", 1e3, 7, 3))
    out = []
    value = float(ns)
    for suffix, scale, width, prec in parts:
        cur = value / scale
        if cur >= 1.0 or out or suffix == "us":
            if prec:
                out.append(f"{cur:0{width}.{prec}f}{suffix}")
            else:
                out.append(f"{int(math.floor(cur)):0{width}d}{suffix}")
            value -= math.floor(cur) * scale
    return "".join(out)


def format_bytes(n):
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    i = 0
    v = float(n)
    while v >= 1024.0 and i + 1 < len(units):
        v /= 1024.0
        i += 1
    return f"{v:.2f}{units[i]}"


def format_number(v):
    return f"{v:g}" if isinstance(v, float) else str(v)


_KIND_REPR = {"time": format_time, "bytes": format_bytes, "number": format_number}


def counter(name, inc=1):
    with _lock:
        counters[name] = counters.get(name, 0) + inc


def metric(name, value, kind="time"):
    with _lock:
        m = metrics.get(name)
        if m is None:
            m = metrics[name] = Metric(_KIND_REPR[kind])
        m.add(value)


class timed:
    """Context manager recording elapsed nanoseconds into a time metric."""
    __slots__ = ("name", "t0")

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        metric(self.name, time.perf_counter_ns() - self.t0)
        return False


def percentiles():
    spec = os.environ.get("XLA_METRICS_PERCENTILES", "0.01:0.05:0.1:0.2:0.5:0.8:0.9:0.95:0.99")
    return [float(p) for p in spec.split(":") if p]


def metric_block(name, m):
    lines = [f"Metric: {name}", f"  TotalSamples: {m.total}", f"  Accumulator: {m.repr(m.acc)}"]
    samples = m.ordered_samples()
    if samples:
        dt = samples[-1][0] - samples[0][0]
        if dt > 0:
            total = sum(v for _, v in samples)
            lines.append(f"  ValueRate: {m.repr(total * 1e9 / dt)} / second")
            lines.append(f"  Rate: {(len(samples) - 1) * 1e9 / dt:g} / second")
    values = sorted(v for _, v in samples)
    if values:
        pcs = []
        for p in percentiles():
            idx = min(int(p * len(values)), len(values) - 1)
            pcs.append(f"{p * 100:g}%={m.repr(values[idx])}")
        lines.append("  Percentiles: " + "; ".join(pcs))
    return "\n".join(lines) + "\n"


def counter_block(name, value):
    return f"Counter: {name}\n  Value: {value}\n"


def report(metric_names=None, counter_names=None):
    with _lock:
        ms = sorted((n, m) for n, m in metrics.items() if m.total and (metric_names is None or n in metric_names))
        cs = sorted((n, v) for n, v in counters.items() if v and (counter_names is None or n in counter_names))
        return "".join(metric_block(n, m) for n, m in ms) + "".join(counter_block(n, v) for n, v in cs)


def clear_counters():
    with _lock:
        counters.clear()


def clear_metrics():
    with _lock:
        metrics.clear()
