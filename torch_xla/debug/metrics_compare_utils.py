"""torch_xla.debug.metrics_compare_utils: parse metrics reports and flag regressions."""
import re

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# byte amounts are compared in (decimal) megabytes, as upstream's keys say (`_mb`)
_MB = {"B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3, "TB": 1e6, "PB": 1e9}
_BYTES_RE = re.compile(r"^(\d+(?:\.\d+)?)(B|KB|MB|GB|TB|PB)$")
_TIME_RE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|ms|s|m|h|d))+$")
_SKIPPED = ("Rate", "ValueRate")   # rates depend on when a report was taken


def _value(text, dehumanize):
    """-> (key suffix, value): '1.54MB' -> ('_mb', 1.54); '01m29s615ms' ->
    ('_sec', 89.615); '3.2' -> ('', 3.2); not dehumanized: ('', text)."""
    text = text.strip().split()[0] if text.strip() else ""
    if not dehumanize:
        return "", text
    m = _BYTES_RE.match(text)
    if m:
        return "_mb", float(m.group(1)) * _MB[m.group(2)]
    if _TIME_RE.match(text):
        total = sum(float(n) * _TIME_UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)", text))
        return "_sec", total
    return "", float(text)


def parse_metrics_report(report, dehumanize=True):
    """{name: value} of one report, keyed as upstream: counters `<Name>__Value`
    (int); metrics `<Name>__TotalSamples`, `<Name>__Accumulator` and
    `<Name>__Percentile_<p>`, with `_mb` (megabytes) or `_sec` (seconds) appended
    for byte and time amounts. Rates are left out."""
    out = {}
    current, is_counter = None, False
    for line in report.splitlines():
        line = line.strip()
        m = re.match(r"^(Metric|Counter): (\S+)", line)
        if m:
            current, is_counter = m.group(2), m.group(1) == "Counter"
            continue
        if current is None:
            continue
        m = re.match(r"^(\w+): (.+)$", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        if key in _SKIPPED:
            continue
        try:
            if key == "Percentiles":
                for pct, v in re.findall(r"(\d+(?:\.\d+)?)%=([^;]+)", val):
                    suffix, x = _value(v, dehumanize)
                    out[f"{current}__Percentile_{pct}{suffix}"] = x
            elif is_counter and key == "Value":
                out[f"{current}__Value"] = int(val.strip()) if dehumanize else val.strip()
            else:
                suffix, x = _value(val, dehumanize)
                out[f"{current}__{key}{suffix}"] = x
        except ValueError:
            out[f"{current}__{key}"] = val.strip()
    return out


def get_data_points_from_metrics_reports(metrics_reports):
    """{name: [value per report]} over several report texts."""
    points = {}
    for i, report in enumerate(metrics_reports):
        for key, val in parse_metrics_report(report).items():
            points.setdefault(key, [None] * i).append(val)
        for vals in points.values():
            if len(vals) < i + 1:
                vals.append(None)
    return points


def compare_metrics(data_points, metrics_report, config=None):
    """A text listing each metric of metrics_report that falls outside
    mean +- `base_expression` std of its past data_points ('' when none does).
    config: {'base_expression': 'v <= v_mean + (v_std * 3.0)', 'overrides': {name: expression}}."""
    import statistics
    config = config or {}
    base = config.get("base_expression", "v <= v_mean + (v_std * 3.0)")
    overrides = config.get("overrides", {})
    problems = []
    for key, v in parse_metrics_report(metrics_report).items():
        past = [float(x) for x in data_points.get(key, []) if isinstance(x, (int, float))]
        if not isinstance(v, (int, float)) or len(past) < 2:
            continue
        expr = overrides.get(key, base)
        if expr is None:
            continue
        env = {"v": v, "v_mean": statistics.mean(past), "v_std": statistics.pstdev(past)}
        if not eval(expr, {"__builtins__": {}}, env):  # noqa: S307  (expressions are the caller's config)
            problems.append(f"{key} failed its expression check. Expression: {expr}.  "
                            f"Mean: {env['v_mean']}.  Stdev: {env['v_std']}.  Actual Value: {v}")
    return "\n".join(problems)
