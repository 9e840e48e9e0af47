import inspect

import torch


def _takes_found_inf(optimizer):
    try:
        return "found_inf" in inspect.signature(optimizer.step).parameters
    except (TypeError, ValueError):
        return False


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler on the XLA device (float16 training on any platform).

    With an optimizer whose `step` takes `found_inf` (`torch_xla.amp.syncfree`),
    the step gets the device-side found_inf tensor and masks the update in the
    graph: no host read. Optimizers with `_step_supports_amp_scaling`
    (torch's `fused=True`) get grad_scale/found_inf from torch's own path, also
    without a host read. Other optimizers are stepped as torch does (one read
    of found_inf)."""

    def __init__(self, device="xla", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if "xla" not in str(device):
            raise ValueError("torch_xla.amp.GradScaler is for the xla device")
        super().__init__("xla", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if not _takes_found_inf(optimizer) or "found_inf" in kwargs:
            return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        found = None
        for v in optimizer_state["found_inf_per_device"].values():
            v = v.to("xla")
            found = v if found is None else found + v
        return optimizer.step(*args, found_inf=found, **kwargs)
