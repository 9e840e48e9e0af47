"""torch_xla.distributed.data_parallel: the old single-process, thread-per-device
DataParallel.

Here a process owns one XLA device, so DataParallel runs one replica, in the calling
thread, on this process's device (several processes: torch_xla.launch / xmp.spawn give
data parallelism, each running its own DataParallel). Asking for devices this process
does not own raises."""
import copy

import torch


class Context:
    """Per-device state that lives as long as the DataParallel object."""

    def __init__(self, device):
        self.device = device

    def getattr_or(self, name, defval):
        """The attribute `name`, created from defval (called when callable) on first use."""
        value = getattr(self, name, None)
        if value is None:
            value = defval() if callable(defval) else defval
            setattr(self, name, value)
        return value


class ThreadResult:
    def __init__(self):
        self.result = None


class DataParallel:
    """`DataParallel(network, device_ids=None, **loader_kwargs)`; call it with
    loop_fn(model, device_loader, device, context) to run one epoch."""

    def __init__(self, network, device_ids=None, **kwargs):
        from ..core import xla_model as xm
        if device_ids is None:
            device_ids = xm.get_xla_supported_devices()
        self._device_ids = [str(d) for d in device_ids]
        own = set(xm.get_xla_supported_devices())
        foreign = [d for d in self._device_ids if d not in own]
        if foreign:
            raise NotImplementedError(
                f"DataParallel: this process owns {sorted(own)}, not {foreign}; one process per device "
                "(torch_xla.launch / xmp.spawn) replaces thread-per-device DataParallel")
        module = network if isinstance(network, torch.nn.Module) else network()
        self._kwargs = kwargs
        self._native_run = not self._device_ids
        if self._native_run:
            devices = {str(p.device) for p in module.parameters()}
            if len(devices) > 1:
                raise RuntimeError(f"Model uses more than one device: {sorted(devices)}")
            self._device_ids = [devices.pop() if devices else "cpu"]
            self._models = [module]
        else:
            self._models = [copy.deepcopy(module).to(torch.device(d)) for d in self._device_ids]
        self._contexts = [Context(torch.device(d)) for d in self._device_ids]

    @property
    def devices(self):
        return self._device_ids

    @property
    def models(self):
        return self._models

    def __call__(self, loop_fn, loader, batchdim=0, **kwargs):
        """Run loop_fn over one epoch of `loader`; returns [its result] (one device)."""
        if self._native_run:
            return [loop_fn(self._models[0], enumerate(loader), torch.device(self._device_ids[0]),
                            self._contexts[0], self._kwargs)]
        from . import parallel_loader as pl
        para = pl.ParallelLoader(loader, self._device_ids, batchdim=batchdim, **self._kwargs)
        try:
            device = self._device_ids[0]
            return [loop_fn(self._models[0], para.per_device_loader(device), torch.device(device),
                            self._contexts[0], **kwargs)]
        finally:
            para.close()
