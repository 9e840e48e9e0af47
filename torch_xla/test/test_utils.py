"""torch_xla.test.test_utils: the logging helpers upstream's examples use."""
import os
import sys
from datetime import datetime


def now(format="%H:%M:%S"):  # noqa: A002
    """The current wall-clock time, formatted."""
    return datetime.now().strftime(format)


def _fmt(v, spec=".5f"):
    if v is None:
        return "None"
    if hasattr(v, "item"):
        v = v.item()
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def print_training_update(device, step, loss, rate, global_rate, epoch=None, summary_writer=None):
    """Print one training progress line: device, epoch, step, loss and rates."""
    parts = [f"[xla:{_ordinal(device)}]({now()})"]
    if epoch is not None:
        parts.append(f"Epoch={epoch}")
    parts += [f"Step={step}", f"Loss={_fmt(loss)}", f"Rate={_fmt(rate, '.2f')}",
              f"GlobalRate={_fmt(global_rate, '.2f')}", f"Time={now()}"]
    print("| Training Device=" + parts[0] + " " + " ".join(parts[1:]), flush=True)


def print_test_update(device, accuracy, epoch=None, step=None):
    """Print one test line: device, epoch/step and accuracy."""
    parts = []
    if epoch is not None:
        parts.append(f"Epoch={epoch}")
    if step is not None:
        parts.append(f"Step={step}")
    parts += [f"Accuracy={_fmt(accuracy, '.2f')}", f"Time={now()}"]
    print(f"| Test Device=[xla:{_ordinal(device)}] " + " ".join(parts), flush=True)


def _ordinal(device):
    try:
        import torch_xla.runtime as xr
        return xr.global_ordinal()
    except Exception:  # noqa: BLE001
        return 0


def get_summary_writer(logdir):
    """A TensorBoard SummaryWriter for logdir, or None without a logdir."""
    if not logdir:
        return None
    from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter(log_dir=os.path.join(logdir, f"{os.getpid()}"))


def write_to_summary(summary_writer, global_step=None, dict_to_write=None, write_xla_metrics=False):
    if summary_writer is None:
        return
    for k, v in (dict_to_write or {}).items():
        summary_writer.add_scalar(k, v, global_step)


def close_summary_writer(summary_writer):
    if summary_writer is not None:
        summary_writer.close()


del sys
