import torch

from . import _functional as F


def _check(found_inf):
    if found_inf.dim() != 0:
        raise ValueError("The found_inf tensor has to be scalar type")


def adam_family_step(opt, closure, found_inf, use_adamw):
    _check(found_inf)
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    for group in opt.param_groups:
        params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = [], [], [], [], [], []
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")
            params.append(p)
            grads.append(p.grad)
            state = opt.state[p]
            if not state:
                state["step"] = torch.zeros_like(found_inf, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            max_sqs.append(state.get("max_exp_avg_sq"))
            steps.append(state["step"])
        F.adam_step(found_inf, steps, params, grads, exp_avgs, exp_avg_sqs, max_sqs,
                    amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                    weight_decay=group["weight_decay"], eps=group["eps"],
                    maximize=group.get("maximize", False), use_adamw=use_adamw)
    return loss


class Adam(torch.optim.Adam):
    """torch.optim.Adam whose `step(closure=None, found_inf=None)` takes a 0-dim
    device tensor: nonzero skips the step (parameters, moments and the step
    count stay), decided in the graph, never on the host. found_inf=None is
    torch's own step."""

    @torch.no_grad()
    def step(self, closure=None, found_inf=None):
        if found_inf is None:
            return super().step(closure=closure)
        return adam_family_step(self, closure, found_inf, use_adamw=False)
