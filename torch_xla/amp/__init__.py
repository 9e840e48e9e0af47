"""torch_xla.amp: automatic mixed precision on the XLA device.

`autocast(device, ...)` is torch.autocast for "xla" (bfloat16 by default);
`GradScaler` is PyTorch's scaler for the xla device (needed with float16)."""
import torch


class autocast(torch.autocast):  # noqa: N801 - upstream's name
    """torch.autocast on the XLA device; dtype defaults to bfloat16."""

    def __init__(self, device=None, enabled=True, dtype=None, cache_enabled=None):
        super().__init__("xla", enabled=enabled, dtype=dtype or torch.bfloat16,
                         cache_enabled=cache_enabled if cache_enabled is not None else True)


def GradScaler(*args, **kwargs):  # noqa: N802 - upstream's name
    """A gradient scaler for float16 training on the XLA device."""
    return torch.amp.GradScaler("xla", *args, **kwargs)
