"""torch_xla.utils.checkpoint: activation (gradient) checkpointing on the XLA device.

Recomputation is PyTorch's own `torch.utils.checkpoint`; the device RNG state is saved
and restored around the recomputation so dropout draws the same values."""
import torch
import torch.utils.checkpoint as _tc


def get_device_states(*args):
    """(devices, RNG states) of the XLA devices of the tensor arguments."""
    from ..core import xla_model as xm
    devices = sorted({str(a.device) for a in args if isinstance(a, torch.Tensor) and a.device.type == "xla"})
    return devices, [xm.get_rng_state(d) for d in devices]


def set_device_states(devices, states):
    from ..core import xla_model as xm
    for device, state in zip(devices, states):
        xm.set_rng_state(state, device)


class CheckpointStatus:
    """Set while a checkpointed function recomputes (upstream's flag)."""
    is_recomputing = False


class CheckpointFunction(torch.autograd.Function):
    """Reentrant checkpoint: forward without saving activations, recompute in backward."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        if preserve_rng_state:
            ctx.cpu_state = torch.get_rng_state()
            ctx.devices, ctx.device_states = get_device_states(*args)
        ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
        ctx.layout = [isinstance(a, torch.Tensor) for a in args]
        ctx.others = [a for a in args if not isinstance(a, torch.Tensor)]
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        tensors = iter(ctx.saved_tensors)
        others = iter(ctx.others)
        inputs = []
        for is_t in ctx.layout:
            if is_t:
                t = next(tensors)
                inputs.append(t.detach().requires_grad_(t.requires_grad))
            else:
                inputs.append(next(others))
        from ..core import xla_model as xm
        with torch.random.fork_rng(devices=[], enabled=ctx.preserve_rng_state), \
                xm.fork_rng(enabled=ctx.preserve_rng_state):
            if ctx.preserve_rng_state:
                torch.set_rng_state(ctx.cpu_state)
                set_device_states(ctx.devices, ctx.device_states)
            CheckpointStatus.is_recomputing = True
            try:
                with torch.enable_grad():
                    outputs = ctx.run_function(*inputs)
            finally:
                CheckpointStatus.is_recomputing = False
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(i.grad if isinstance(i, torch.Tensor) else None for i in inputs)


def checkpoint(function, *args, use_reentrant=None, **kwargs):
    """torch.utils.checkpoint.checkpoint for XLA tensors (same arguments)."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if use_reentrant is None:
        use_reentrant = True
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return CheckpointFunction.apply(function, preserve, *args)
    return _tc.checkpoint(function, *args, use_reentrant=False, preserve_rng_state=preserve, **kwargs)
