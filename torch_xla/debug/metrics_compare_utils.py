"""torch_xla.debug.metrics_compare_utils: parse metrics reports and flag regressions."""
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0,
          "B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}
_TIME = re.compile(r"^((?:\d+[dhm])*\d*(?:\.\d+)?(?:ns|us|ms|s)?)$")


def _dehumanize(text):
    """'1m03s' -> 63.0 seconds, '12.5MB' -> bytes, '3.2' -> 3.2."""
    text = text.strip()
    total, found = 0.0, False
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ns|us|ms|KB|MB|GB|TB|B|s|m|h|d)", text):
        total += float(num) * _UNITS[unit]
        found = True
    if found:
        return total
    return float(text)


def parse_metrics_report(report, dehumanize=True):
    """{name: value}: counters as `<Name>__Value`, metrics as `<Name>__TotalSamples`,
    `__Accumulator`, `__Percentile_<p>` etc., values as floats when dehumanize."""
    out = {}
    current = None
    for line in report.splitlines():
        line = line.strip()
        m = re.match(r"^(Metric|Counter): (\S+)", line)
        if m:
            current = m.group(2)
            continue
        if current is None:
            continue
        m = re.match(r"^(\w+): (.+)$", line)
        if m:
            key, val = m.group(1), m.group(2)
            if key == "Percentiles":
                for p, v in re.findall(r"(\d+(?:\.\d+)?)%=([^;]+)", val):
                    out[f"{current}__Percentile_{p}"] = _conv(v, dehumanize)
            else:
                out[f"{current}__{key}"] = _conv(val, dehumanize)
    return out


def _conv(v, dehumanize):
    v = v.strip()
    if not dehumanize:
        return v
    try:
        return _dehumanize(v.split()[0])
    except ValueError:
        return v


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
        past = [x for x in data_points.get(key, []) if isinstance(x, float)]
        if not isinstance(v, float) or len(past) < 2:
            continue
        expr = overrides.get(key, base)
        if expr is None:
            continue
        env = {"v": v, "v_mean": statistics.mean(past), "v_std": statistics.pstdev(past)}
        if not eval(expr, {"__builtins__": {}}, env):  # noqa: S307  (expressions are the caller's config)
            problems.append(f"{key} failed its expression check. Expression: {expr}.  "
                            f"Mean: {env['v_mean']}.  Stdev: {env['v_std']}.  Actual Value: {v}")
    return "\n".join(problems)
