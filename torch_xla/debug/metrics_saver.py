"""torch_xla.debug.metrics_saver: append the metrics report to a file."""
from ..engine import api as _api


def save_metrics(metrics_file=None):
    """Append the metrics report to metrics_file (default: env XLA_METRICS_FILE;
    'STDERR' prints it). Nothing happens when neither is set."""
    import sys
    from . import metrics as met
    metrics_file = metrics_file or _api.config.read("XLA_METRICS_FILE")
    if not metrics_file:
        return
    report = met.metrics_report()
    if metrics_file == "STDERR":
        print(report, file=sys.stderr)
        return
    import torch_xla.runtime as xr
    if xr.world_size() > 1:
        metrics_file = f"{metrics_file}.{xr.global_ordinal()}"
    with open(metrics_file, "a") as f:
        f.write(report)
