import torch

from . import _functional as F
from .adam import _check


class SGD(torch.optim.SGD):
    """torch.optim.SGD whose `step(closure=None, found_inf=None)` skips the
    update in the graph when the 0-dim device tensor found_inf is nonzero."""

    @torch.no_grad()
    def step(self, closure=None, found_inf=None):
        if found_inf is None:
            return super().step(closure=closure)
        _check(found_inf)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, bufs, steps = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if "step" not in state:
                    state["step"] = torch.zeros_like(found_inf, dtype=torch.float32)
                steps.append(state["step"])
                bufs.append(state.get("momentum_buffer"))
            F.sgd_step(found_inf, steps, params, grads, bufs, weight_decay=group["weight_decay"],
                       momentum=group["momentum"], lr=group["lr"], dampening=group["dampening"],
                       nesterov=group["nesterov"], maximize=group.get("maximize", False))
            for p, b in zip(params, bufs):
                if b is not None:
                    self.state[p]["momentum_buffer"] = b
        return loss
