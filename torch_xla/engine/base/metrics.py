"""Counters and metrics, with upstream torch_xla's names and report format.

A counter is a name -> int. A metric keeps its total sample count, the sum of
its values and the last XLA_METRICS_SAMPLES (default 1,024) samples
(timestamp_ns, value) for rates and percentiles. Times are recorded in
nanoseconds, byte metrics in bytes, value metrics as plain numbers.

The report is the text upstream prints: one `Metric:` block per metric with
samples, then one `Counter:` block per non-zero counter, each registry sorted
by name. Nothing here is called per traced op: the engine records at
barriers, transfers and fallbacks only.
"""
import math
import threading
import time

from . import config

_lock = threading.Lock()
counters = {}
metrics = {}
# metric renames in force (eager mode records EagerOpCompileTime instead of CompileTime)
rename = {}
# callables adding counts kept elsewhere until someone reads them (per-op counters)
flushers = []


def flush():
    for f in flushers:
        f()


def _ring_size():
    return max(config.read("XLA_METRICS_SAMPLES"), 1)


_RING = _ring_size()   # read once: open samples hold ring slots, so it cannot change (config.override refuses)


class Metric:
    __slots__ = ("total", "acc", "samples", "pos", "repr")

    def __init__(self, repr_fn):
        self.total = 0
        self.acc = 0.0
        self.samples = []
        self.pos = 0
        self.repr = repr_fn

    def add(self, value, now=None):
        if now is None:
            now = time.time_ns()
        self.total += 1
        self.acc += value
        if len(self.samples) < _RING:
            self.samples.append((now, value))
            return len(self.samples) - 1
        slot = self.pos
        self.samples[slot] = (now, value)
        self.pos = (slot + 1) % _RING
        return slot

    def ordered_samples(self):
        return self.samples[self.pos:] + self.samples[:self.pos]


_TIME_PARTS = (("d", 86400e9, 2, 0), ("h", 3600e9, 2, 0), ("m", 60e9, 2, 0),
               ("s", 1e9, 2, 0), ("ms", 1e6, 3, 0), ("us", 1e3, 7, 3))


def format_time(ns):
    """Upstream's duration format: 317ms794.578us, 02s042ms010.001us, 000.512us.

    Every unit from the largest non-zero one down is printed, zero-padded
    (2 digits, 3 for ms, 7 characters with 3 decimals for us)."""
    value = float(ns)
    out = []
    last = len(_TIME_PARTS) - 1
    for i, (suffix, scale, width, prec) in enumerate(_TIME_PARTS):
        cur = value / scale
        if cur >= 1.0 or out or i == last:
            if prec:
                out.append(f"{cur:0{width}.{prec}f}{suffix}")
            else:
                out.append(f"{int(math.floor(cur)):0{width}d}{suffix}")
            value -= math.floor(cur) * scale
    return "".join(out)


def format_bytes(n):
    """Upstream's byte format: 1.50KB, 12.00MB (powers of 1024, 2 decimals)."""
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    i = 0
    v = float(n)
    while v >= 1024.0 and i + 1 < len(units):
        v /= 1024.0
        i += 1
    return f"{v:.2f}{units[i]}"


def format_number(v):
    """Upstream's plain value format: fixed, 2 decimals."""
    return f"{float(v):.2f}"


_KIND_REPR = {"time": format_time, "bytes": format_bytes, "number": format_number}


def counter(name, inc=1):
    with _lock:
        counters[name] = counters.get(name, 0) + inc


def add_counts(pairs):
    """Add several (name, increment) pairs under one lock."""
    with _lock:
        get = counters.get
        for name, inc in pairs:
            counters[name] = get(name, 0) + inc


def metric(name, value, kind="time"):
    """Add one sample; -> (metric, its ring slot)."""
    if rename:
        name = rename.get(name, name)
    with _lock:
        m = metrics.get(name)
        if m is None:
            m = metrics[name] = Metric(_KIND_REPR[kind])
        return m, m.add(value)


def open_sample(name, value, kind="time"):
    """Record a sample now whose value is known later (a run's time, measured to
    its end): counts stay exact at once; close_sample() sets the final value."""
    m, slot = metric(name, value, kind)
    return m, slot, m.samples[slot], value


def close_sample(handle, value):
    m, slot, sample, old = handle
    with _lock:
        m.acc += value - old
        # the ring may have moved past this sample since
        if slot < len(m.samples) and m.samples[slot] is sample:
            m.samples[slot] = (sample[0], value)


def value_metric(name, value):
    metric(name, value, kind="number")


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
    spec = config.read("XLA_METRICS_PERCENTILES")
    out = []
    for p in spec.split(":"):
        p = p.strip()
        if not p:
            continue
        v = float(p)
        if not 0.0 < v < 1.0:
            raise ValueError(f"XLA_METRICS_PERCENTILES: {v} is not in (0, 1)")
        out.append(v)
    return sorted(out)


def _g(v):
    # C++ ostream's default float format (6 significant digits)
    return f"{v:g}"


def metric_block(name, m):
    samples = m.ordered_samples()
    lines = [f"Metric: {name}", f"  TotalSamples: {m.total}", f"  Accumulator: {m.repr(m.acc)}"]
    if samples:
        dt = samples[-1][0] - samples[0][0]
        if dt > 0:
            total = sum(v for _, v in samples)
            lines.append(f"  ValueRate: {m.repr(total * 1e9 / dt)} / second")
            lines.append(f"  Rate: {_g(len(samples) * 1e9 / dt)} / second")
    values = sorted(v for _, v in samples)
    pcs = []
    if values:
        for p in percentiles():
            idx = min(int(p * len(values)), len(values) - 1)
            pcs.append(f"{_g(p * 100.0)}%={m.repr(values[idx])}")
    lines.append("  Percentiles: " + "; ".join(pcs))
    return "\n".join(lines) + "\n"


def counter_block(name, value):
    return f"Counter: {name}\n  Value: {value}\n"


def _snapshot():
    flush()
    with _lock:
        ms = [(n, m) for n, m in metrics.items() if m.total]
        cs = [(n, v) for n, v in counters.items() if v]
        # copy the sample rings so formatting runs outside the lock
        ms = [(n, _copy(m)) for n, m in ms]
    return ms, cs


def _copy(m):
    c = Metric(m.repr)
    c.total, c.acc, c.samples, c.pos = m.total, m.acc, list(m.samples), m.pos
    return c


def report():
    """Every metric with samples, then every non-zero counter, each sorted by name."""
    ms, cs = _snapshot()
    ms.sort(key=lambda x: x[0])
    cs.sort(key=lambda x: x[0])
    return "".join(metric_block(n, m) for n, m in ms) + "".join(counter_block(n, v) for n, v in cs)


def short_report(counter_names, metric_names):
    """The named metrics and counters (in the order given, when non-zero), then
    every non-zero aten::* counter."""
    ms, cs = _snapshot()
    md = dict(ms)
    cd = dict(cs)
    out = [metric_block(n, md[n]) for n in metric_names if n in md]
    out += [counter_block(n, cd[n]) for n in counter_names if n in cd]
    out += [counter_block(n, v) for n, v in sorted(cs) if n.startswith("aten::")]
    return "".join(out)


def counter_value(name):
    flush()
    return counters.get(name, 0)


def metric_total(name):
    m = metrics.get(name)
    return m.total if m is not None else 0


def clear_counters():
    flush()
    with _lock:
        counters.clear()


def snapshot_counters():
    """Every counter's value now (pending per-op counts included)."""
    flush()
    with _lock:
        return dict(counters)


def restore_counters(saved):
    """Put the counters back to a snapshot_counters() result."""
    flush()
    with _lock:
        counters.clear()
        counters.update(saved)


def clear_metrics():
    with _lock:
        metrics.clear()
