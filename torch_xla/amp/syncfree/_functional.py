"""The sync-free update steps: each parameter's update is computed in the
graph and kept or dropped with `where` on the device-side found_inf."""
import torch

from ...engine.api import adam_update, sgd_update


def _skip(found_inf):
    return found_inf.reshape(()) != 0


def _advance(step, skip):
    """step += 1 unless skipped; returns the new count."""
    new = step + torch.logical_not(skip).to(step.dtype)
    step.copy_(new)
    return new


def adam_step(found_inf, state_steps, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *,
              amsgrad, beta1, beta2, lr, weight_decay, eps, maximize, use_adamw):
    skip = _skip(found_inf)
    for i, p in enumerate(params):
        step = _advance(state_steps[i], skip)
        adam_update(p, grads[i], exp_avgs[i], exp_avg_sqs[i], max_exp_avg_sqs[i], step, lr=lr,
                    beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
                    maximize=maximize, adamw=use_adamw, skip=skip)


def sgd_step(found_inf, state_steps, params, grads, momentum_buffer_list, *, weight_decay, momentum, lr,
             dampening, nesterov, maximize):
    skip = _skip(found_inf)
    for i, p in enumerate(params):
        step = state_steps[i]
        first = step == 0
        buf = momentum_buffer_list[i]
        if buf is None and momentum != 0:
            buf = torch.zeros_like(p)
            momentum_buffer_list[i] = buf
        sgd_update(p, grads[i], buf, lr=lr, weight_decay=weight_decay, momentum=momentum,
                   dampening=dampening, nesterov=nesterov, maximize=maximize, first=first, skip=skip)
        _advance(step, skip)
