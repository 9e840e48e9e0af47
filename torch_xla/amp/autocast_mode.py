import warnings

import torch


def _default_dtype(hw):
    return torch.float16 if hw in ("CUDA", "GPU") else torch.bfloat16


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801 - upstream's name
    """torch.autocast on the XLA device.

    dtype=None picks the platform's type: bfloat16 on TPU (the only type TPU
    autocast takes: another one warns and disables autocast, as upstream) and on
    CPU, float16 on CUDA."""

    def __init__(self, device=None, enabled=True, dtype=None, cache_enabled=True):
        from ..core import xla_model as xm
        if device is None:
            device = "xla"
        if "xla" not in str(device):
            raise AssertionError("torch_xla.amp.autocast is for XLA devices")
        hw = xm.xla_device_hw(device)
        if dtype is None:
            dtype = _default_dtype(hw)
        if hw in ("TPU", "NEURON") and dtype != torch.bfloat16:
            warnings.warn("XLA:TPU autocast supports only torch.bfloat16; autocast is disabled.")
            enabled = False
        self._xla_device = hw
        super().__init__("xla", enabled=enabled, dtype=dtype,
                         cache_enabled=True if cache_enabled is None else cache_enabled)
