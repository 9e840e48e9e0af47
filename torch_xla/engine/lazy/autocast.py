"""torch.autocast("xla"): PyTorch leaves a PrivateUse1 backend's autocast key
empty, so this registers a fallthrough for every op and casting kernels for
the ops that autocast runs in the lower precision (matmuls, convolutions,
attention), the policy upstream uses for XLA."""
import torch

_LOWER = ("mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d",
          "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution", "_convolution",
          "prelu", "scaled_dot_product_attention", "einsum", "dot", "mv", "addmv", "outer", "chain_matmul")
_libs = []
_KEY = torch._C.DispatchKey.AutocastPrivateUse1


def _cast(a, dt):
    if isinstance(a, torch.Tensor) and a.is_floating_point() and a.device.type == "xla" and a.dtype != dt:
        return a.to(dt)
    if isinstance(a, (list, tuple)):
        return type(a)(_cast(x, dt) for x in a)
    return a


def _lower_kernel(op):
    def kernel(*args, **kwargs):
        dt = torch.get_autocast_dtype("xla")
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            return op(*_cast(args, dt), **{k: _cast(v, dt) for k, v in kwargs.items()})
    return kernel


def register():
    fall = torch.library.Library("_", "IMPL", "AutocastPrivateUse1")
    fall.fallback(torch.library.fallthrough_kernel)
    _libs.append(fall)
    lib = torch.library.Library("aten", "IMPL", "AutocastPrivateUse1")
    _libs.append(lib)
    for name in _LOWER:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            if any("out" == a.name for a in op._schema.arguments):
                continue
            full = name if ov == "default" else f"{name}.{ov}"
            try:
                lib.impl(full, _lower_kernel(op))
            except RuntimeError:
                pass
