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


def _device_spec(device):
    """`xla:0/3`: the device and this process's global ordinal."""
    ordinal = _ordinal(device)
    return str(device) if ordinal < 0 else f"{device}/{ordinal}"


def _emit(fields):
    print("|", " ".join(f for f in fields if f), flush=True)


def print_training_update(device, step, loss, rate, global_rate, epoch=None, summary_writer=None):
    """Print one training progress line: device/ordinal, epoch, step, loss and rates."""
    _emit(["Training", f"Device={_device_spec(device)}",
           None if epoch is None else f"Epoch={epoch}",
           f"Step={step}", f"Loss={_fmt(loss)}", f"Rate={_fmt(rate, '.2f')}",
           f"GlobalRate={_fmt(global_rate, '.2f')}", f"Time={now()}"])
    if summary_writer is not None:
        write_to_summary(summary_writer, dict_to_write={
            "examples/sec": rate, "average_examples/sec": global_rate})


def print_test_update(device, accuracy, epoch=None, step=None):
    """Print one test line: device/ordinal, step, epoch and accuracy."""
    _emit(["Test", f"Device={_device_spec(device)}",
           None if step is None else f"Step={step}",
           None if epoch is None else f"Epoch={epoch}",
           None if accuracy is None else f"Accuracy={_fmt(accuracy, '.2f')}",
           f"Time={now()}"])


def mp_test(func):
    """Decorator: run a test function in a child process; a TestCase asserts exit code 0."""
    import functools
    import multiprocessing
    import unittest

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        proc = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
        proc.start()
        proc.join()
        if args and isinstance(args[0], unittest.TestCase):
            args[0].assertEqual(proc.exitcode, 0)
        return proc.exitcode
    return wrapper


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
