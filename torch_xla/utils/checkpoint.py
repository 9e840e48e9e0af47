"""torch_xla.utils.checkpoint: activation checkpointing on the XLA device.

`checkpoint(function, *args, use_reentrant=True, preserve_rng_state=True)`
runs `function` without keeping its activations and runs it again during the
backward pass. Before the recompute, the saved inputs, the incoming gradients
and the module's parameters and buffers pass through `xm.optimization_barrier_`,
so XLA cannot fold the recompute back into the forward pass (which would keep
the activations alive after all). With preserve_rng_state, the recompute sees
the device and CPU generator states the forward saw (same dropout masks), and
the generators are restored afterwards."""
import torch

from ..engine import api as _api

from ..core import xla_model as xm

__all__ = ["checkpoint", "CheckpointFunction"]


def _autocast_state(device_type):
    return {"device_type": device_type, "enabled": torch.is_autocast_enabled(device_type),
            "dtype": torch.get_autocast_dtype(device_type), "cache_enabled": torch.is_autocast_cache_enabled()}


def _module_tensors(fn):
    while getattr(fn, "__wrapped__", None) is not None:   # a wrapper of a module's forward
        fn = fn.__wrapped__
    mod = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(mod, torch.nn.Module):
        return []
    return list(mod.parameters()) + list(mod.buffers())


class _device_rng:
    """Saves the device generator on entry, restores it on exit."""

    def __enter__(self):
        rng = _api.rng_state()
        self.saved = (rng.seed, rng.initial)
        return self

    def __exit__(self, *exc):
        rng = _api.rng_state()
        rng.seed, rng.initial = self.saved
        return False


def get_device_states(*args):
    """(devices, RNG states) of the XLA devices of the tensor arguments."""
    from ..core import xla_model as xm
    devices = sorted({str(a.device) for a in args if isinstance(a, torch.Tensor) and a.device.type == "xla"})
    return devices, [xm.get_rng_state(d) for d in devices]


def set_device_states(devices, states):
    """Restore the RNG states `get_device_states` returned."""
    from ..core import xla_model as xm
    for device, state in zip(devices, states):
        xm.set_rng_state(state, device)


class CheckpointStatus:
    """Set while a checkpointed function recomputes (upstream's flag)."""
    is_recomputing = False


class CheckpointFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        rng = _api.rng_state()
        torch.utils.checkpoint.check_backward_validity(args)
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        ctx.autocast = [_autocast_state("cpu"), _autocast_state("xla")]
        if preserve_rng_state:
            ctx.fwd_xla_seed = rng.seed
            ctx.fwd_cpu_state = torch.get_rng_state()
        ctx.inputs = []
        ctx.tensor_indices = []
        tensors = []
        for i, a in enumerate(args):
            if torch.is_tensor(a):
                tensors.append(a)
                ctx.tensor_indices.append(i)
                ctx.inputs.append(None)
            else:
                ctx.inputs.append(a)
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        rng = _api.rng_state()
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError(
                "Checkpointing is not compatible with .grad() or when an `inputs` parameter is passed "
                "to .backward(). Please use .backward() and do not pass its `inputs` argument.")
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        barrier = [t for t in inputs + list(grads) + _module_tensors(ctx.run_function)
                   if isinstance(t, torch.Tensor) and t.device.type == "xla"]
        xm.optimization_barrier_(barrier)
        with torch.random.fork_rng(devices=[], enabled=ctx.preserve_rng_state), _device_rng():
            if ctx.preserve_rng_state:
                rng.seed = ctx.fwd_xla_seed
                torch.set_rng_state(ctx.fwd_cpu_state)
            detached = torch.utils.checkpoint.detach_variable(tuple(inputs))
            with torch.enable_grad(), torch.autocast(**ctx.autocast[0]), torch.autocast(**ctx.autocast[1]):
                outputs = ctx.run_function(*detached)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        outs, gs = [], []
        for o, g in zip(outputs, grads):
            if torch.is_tensor(o) and o.requires_grad:
                outs.append(o)
                gs.append(g)
        if not outs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        torch.autograd.backward(outs, gs)
        return (None, None) + tuple(t.grad if isinstance(t, torch.Tensor) else None for t in detached)


def checkpoint(function, *args, use_reentrant: bool = True, **kwargs):
    """Run `function(*args)` keeping no activations; recompute them in backward.

    Keyword arguments: preserve_rng_state (default True): the recompute draws
    the same random numbers as the forward. Only use_reentrant=True is
    supported (as upstream); other keyword arguments raise ValueError."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not use_reentrant:
        raise ValueError("XLA currently does not support use_reentrant==False")
    return CheckpointFunction.apply(function, preserve, *args)
