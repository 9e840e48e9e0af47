"""Optimizer and gradient-scaling kernels on the device.

`torch.optim.{Adam,AdamW,SGD}(fused=True)` call `_fused_adam_`, `_fused_adamw_`
and `_fused_sgd_`; `torch.amp.GradScaler` calls
`_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`. Each is
a handler that writes the update with ordinary tensor ops on XLA tensors, so the
whole update is traced into the step graph. `found_inf` never leaves the
device: a step with a non-finite gradient is masked with `where` instead of
being skipped on the host. The `adam_update` / `sgd_update` helpers are shared
with `torch_xla.amp.syncfree`.
"""
import torch
import torch.optim.optimizer as _optimizer
import torch.utils._foreach_utils as _foreach_utils

from ...ops.registry import handler
from ..tensor import XLATensor


def _allow_foreach():
    """torch's optimizers (and clip_grad_norm_) take their `foreach` path, one
    `_foreach_*` call per parameter list, only for tensors whose exact type is
    in `torch.utils._foreach_utils._foreach_supported_types` on a device of
    `_get_foreach_kernels_supported_devices()` ("xla" is listed). Upstream's XLA
    tensors are plain torch.Tensors, so torch picks foreach for them; ours are
    XLATensors and fell back to the per-parameter loop (each op a dispatch of its
    own). The type joins that list, so the default is upstream's: dispatch.py
    traces each `_foreach_` call element by element into the same graph."""
    for module in (_optimizer, _foreach_utils):
        types = getattr(module, "_foreach_supported_types", None)
        if isinstance(types, list) and XLATensor not in types:
            types.append(XLATensor)


_allow_foreach()


def _flag(found_inf):
    """found_inf (a 0-dim float tensor, or None) -> bool tensor: skip this step."""
    if found_inf is None:
        return None
    return found_inf.reshape(()) != 0


def _keep(skip, old, new):
    """old where the step is skipped, new otherwise (in old's dtype)."""
    new = new.to(old.dtype)
    if skip is None:
        return new
    return torch.where(skip, old, new)


def _write(dst, value):
    dst.copy_(value)


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, *, lr, beta1, beta2,
                weight_decay, eps, amsgrad, maximize, adamw, skip=None, grad_scale=None):
    """One Adam/AdamW update of one parameter, in place, masked by `skip`.
    `step` is the step count after this update (a tensor or a number)."""
    g = grad
    if grad_scale is not None:
        g = g / grad_scale.to(g.dtype)
        _write(grad, _keep(skip, grad, g))
    g = g.to(exp_avg.dtype)
    if maximize:
        g = -g
    p = param
    if weight_decay != 0:
        if adamw:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + p.to(g.dtype) * weight_decay
    m = exp_avg * beta1 + g * (1 - beta1)
    v = exp_avg_sq * beta2 + g * g * (1 - beta2)
    if isinstance(step, torch.Tensor):
        st = step.to(torch.float32)
        bc1 = 1 - torch.pow(beta1, st)
        bc2 = 1 - torch.pow(beta2, st)
    else:
        bc1 = 1 - beta1 ** step
        bc2 = 1 - beta2 ** step
    if amsgrad:
        vmax = torch.maximum(max_exp_avg_sq, v)
        denom = torch.sqrt(vmax) / (bc2 ** 0.5) + eps
        _write(max_exp_avg_sq, _keep(skip, max_exp_avg_sq, vmax))
    else:
        denom = torch.sqrt(v) / (bc2 ** 0.5) + eps
    new_p = p - (m / denom) * (lr / bc1)
    _write(exp_avg, _keep(skip, exp_avg, m))
    _write(exp_avg_sq, _keep(skip, exp_avg_sq, v))
    _write(param, _keep(skip, param, new_p))


def sgd_update(param, grad, buf, *, lr, weight_decay, momentum, dampening, nesterov, maximize,
               first, skip=None, grad_scale=None):
    """One SGD update of one parameter, in place, masked by `skip`. `first`:
    bool, or a bool tensor, true when the momentum buffer starts from the gradient."""
    g = grad
    if grad_scale is not None:
        g = g / grad_scale.to(g.dtype)
        _write(grad, _keep(skip, grad, g))
    if maximize:
        g = -g
    if weight_decay != 0:
        g = g + param * weight_decay
    if momentum != 0:
        acc = buf * momentum + g * (1 - dampening)
        if isinstance(first, torch.Tensor):
            nb = torch.where(first, g.to(buf.dtype), acc.to(buf.dtype))
        else:
            nb = g if first else acc
        g = g + nb * momentum if nesterov else nb
        _write(buf, _keep(skip, buf, nb))
    _write(param, _keep(skip, param, param - g * lr))


def _fused_adam(adamw):
    def h(args, kwargs):
        params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = args[:6]
        kw = dict(kwargs)
        skip = _flag(kw.get("found_inf"))
        for i, p in enumerate(params):
            adam_update(p, grads[i], exp_avgs[i], exp_avg_sqs[i], max_sqs[i] if kw["amsgrad"] else None,
                        steps[i], lr=kw["lr"], beta1=kw["beta1"], beta2=kw["beta2"],
                        weight_decay=kw["weight_decay"], eps=kw["eps"], amsgrad=kw["amsgrad"],
                        maximize=kw["maximize"], adamw=adamw, skip=skip, grad_scale=kw.get("grad_scale"))
    return h


handler("_fused_adam_")(_fused_adam(False))
handler("_fused_adamw_")(_fused_adam(True))


@handler("_fused_sgd_")
def _fused_sgd(args, kwargs):
    params, grads, bufs = args[:3]
    kw = dict(kwargs)
    skip = _flag(kw.get("found_inf"))
    for i, p in enumerate(params):
        sgd_update(p, grads[i], bufs[i] if bufs else None, lr=kw["lr"], weight_decay=kw["weight_decay"],
                   momentum=kw["momentum"], dampening=kw["dampening"], nesterov=kw["nesterov"],
                   maximize=kw["maximize"], first=kw["is_first_step"], skip=skip,
                   grad_scale=kw.get("grad_scale"))


@handler("_amp_foreach_non_finite_check_and_unscale_")
def _amp_unscale(args, kwargs):
    grads, found_inf, inv_scale = (list(args) + [kwargs.get("found_inf"), kwargs.get("inv_scale")])[:3]
    bad = None
    for g in grads:
        b = torch.logical_not(torch.isfinite(g)).any()
        bad = b if bad is None else torch.logical_or(bad, b)
        g.mul_(inv_scale.to(g.dtype))
    if bad is not None:
        found_inf.copy_(torch.where(bad, torch.ones_like(found_inf), found_inf))


@handler("_amp_update_scale_")
def _amp_update_scale(args, kwargs):
    names = ("self", "growth_tracker", "found_inf", "scale_growth_factor", "scale_backoff_factor",
             "growth_interval")
    a = dict(zip(names, args))
    a.update(kwargs)
    scale, tracker, found = a["self"], a["growth_tracker"], a["found_inf"]
    bad = found.reshape(()) != 0
    grown = tracker + 1
    grow = torch.logical_and(torch.logical_not(bad), grown >= a["growth_interval"])
    up = scale * a["scale_growth_factor"]
    up = torch.where(torch.isfinite(up), up, scale)
    new_scale = torch.where(bad, scale * a["scale_backoff_factor"], torch.where(grow, up, scale))
    new_tracker = torch.where(torch.logical_or(bad, grow), torch.zeros_like(tracker), grown)
    scale.copy_(new_scale)
    tracker.copy_(new_tracker)
    return scale
