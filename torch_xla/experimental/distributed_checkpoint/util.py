"""prime_optimizer: give an optimizer its state before a checkpoint is loaded into it."""
import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.engine import api as _api


def prime_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Run one optimizer step with zero gradients (sharded like their parameters),
    so that the state tensors exist and torch.distributed.checkpoint can load into
    them in place. It changes the state and possibly the parameters (weight decay):
    use it only right before restoring. Returns the optimizer."""
    torch_xla.sync()
    xm.wait_device_ops()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if isinstance(p, torch.Tensor) and p.requires_grad:
                p.grad = torch.zeros_like(p, requires_grad=False)
                sharding = _api.current_sharding(p) if p.device.type == "xla" else None
                if sharding is not None:
                    _api.mark_sharding(p.grad, sharding)
    optimizer.step()
    torch_xla.sync()
    xm.wait_device_ops()
    return optimizer
