"""Run Python code when an XLA tensor's device buffer is ready."""
import threading
from typing import Callable

import torch


def on_ready_callback(tensor: torch.Tensor, callback: Callable[[torch.Tensor], None]):
    """Call `callback(tensor)` on a helper thread once `tensor`'s buffer is ready.

    A tensor with pending ops is executed first. The callback runs without the
    caller holding anything; it must not wait on the thread that installed it."""
    import torch_xla
    torch_xla._XLAC._on_ready_callback(tensor, lambda: callback(tensor))


def on_ready_event(tensor: torch.Tensor) -> threading.Event:
    """A threading.Event set once `tensor`'s buffer is ready."""
    import torch_xla
    event = threading.Event()
    torch_xla._XLAC._on_ready_callback(tensor, event.set)
    return event
