"""What `import torch_xla` changes in torch, as upstream does, kept invisible to CPU code.

Upstream replaces `torch.nn.GRU` with its scan-based GRU and
`torch.nn.utils.clip_grad_norm_` with an XLA-friendly one when torch_xla is
imported. Lightning imports torch_xla just to ask whether a TPU exists, so these
replacements reach plain CPU programs too; here each one behaves exactly as
torch's own on CPU tensors:
- `nn.GRU` becomes `torch_xla.experimental.gru.GRU`, a subclass that adds
  nothing (the device lowers torch's fused GRU op directly); a pickled or
  copied instance is recorded as torch's `nn.GRU`, so a saved model loads
  where torch_xla is not installed.
- `clip_grad_norm_` is torch's, except that with no gradient to clip it returns
  the zero norm on the XLA device when the parameters live there (torch puts it
  on the CPU, which would make the caller's step read the host).
The originals stay reachable as `._orig`, as upstream's tests expect.
"""
import copyreg
import functools

import torch
import torch.nn as nn


def _clip_grad_norm_for(orig):
    @functools.wraps(orig)
    def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                        foreach=None):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        else:
            parameters = list(parameters)  # a generator is read once
        norm = orig(parameters, max_norm, norm_type, error_if_nonfinite, foreach)
        if norm.device.type == "cpu" and all(p.grad is None for p in parameters):
            on_xla = next((p.device for p in parameters if p.device.type == "xla"), None)
            if on_xla is not None:
                return norm.to(on_xla)
        return norm
    clip_grad_norm_._orig = orig  # functools.wraps also gives it torch's signature
    return clip_grad_norm_


def _reduce_as_torch_gru(module):
    # what pickle does for a plain object (protocol 0-1 form), naming torch's class
    return copyreg._reconstructor, (nn.GRU._orig, object, None), module.__getstate__()


def _apply_patches():
    from .experimental import gru
    if getattr(nn.utils.clip_grad_norm_, "_orig", None) is None:
        nn.utils.clip_grad_norm_ = _clip_grad_norm_for(nn.utils.clip_grad_norm_)
    gru.patch_nn_gru()
    copyreg.pickle(gru.GRU, _reduce_as_torch_gru)
