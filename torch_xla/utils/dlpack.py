"""torch_xla.utils.dlpack: exchange XLA tensors through DLPack with no copy
where the platform allows it.

- `to_dlpack(xla_tensor)` runs the tensor's pending ops and exports its device
  buffer. The result has `__dlpack__` / `__dlpack_device__`, so every DLPack
  consumer takes it: `jax.dlpack.from_dlpack`, `torch.from_dlpack` /
  `torch.utils.dlpack.from_dlpack` (a CPU tensor sharing the buffer on the CPU
  platform), `numpy.from_dlpack`. `.capsule()` gives a bare PyCapsule.
- `from_dlpack(obj)`: an XLA tensor from a PyCapsule, a JAX array, a torch
  tensor, or anything with `__dlpack__`.
- After `install()` (done at `import torch_xla`), `torch.utils.dlpack.to_dlpack`
  of an XLA tensor goes through `to_dlpack`, and an XLA tensor itself speaks the
  protocol (`jax.dlpack.from_dlpack(t)`).

The exported buffer is the tensor's current value: an in-place update of the
tensor afterwards makes a new buffer and does not show through the export."""
import torch

_orig_torch_to_dlpack = None


def _export_array(xla_tensor):
    """The jax.Array of xla_tensor's value, in its PyTorch dtype."""
    from ..engine import api
    return api.export_array(xla_tensor)


class DLPackExport:
    """One exported buffer: a DLPack producer (`__dlpack__`, `__dlpack_device__`)."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *args, **kwargs):
        try:
            return self.array.__dlpack__(*args, **kwargs)
        except TypeError:
            return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def capsule(self):
        return self.array.__dlpack__()

    def __repr__(self):
        return f"DLPackExport({self.array.dtype}{list(self.array.shape)} on {self.array.device})"


def to_dlpack(xla_tensor):
    """A DLPack export of the XLA tensor's device buffer (runs pending ops first)."""
    from ..engine import api
    if not api.is_xla_tensor(xla_tensor):
        raise TypeError(f"torch_xla.utils.dlpack.to_dlpack takes an XLA tensor, got {type(xla_tensor).__name__} "
                        f"on {getattr(xla_tensor, 'device', None)}")
    return DLPackExport(_export_array(xla_tensor))


def _capsule_to_jax(capsule):
    # JAX takes producers, not bare capsules: torch reads the capsule (no copy) and hands it on
    return _torch_to_jax(torch._C._from_dlpack(capsule))


def _torch_to_jax(t):
    import jax
    import jax.numpy as jnp
    from ..engine.api import torch_to_numpy
    if t.device.type == "cpu" or t.device.type == "cuda":
        try:
            return jax.dlpack.from_dlpack(t.detach())
        except Exception:  # noqa: BLE001 - layouts or dtypes DLPack cannot carry: copy
            pass
    return jnp.asarray(torch_to_numpy(t.detach().cpu()))


def from_dlpack(ext_tensor):
    """An XLA tensor from a DLPack capsule or an object with `__dlpack__`."""
    import jax
    import jax.numpy as jnp
    from ..engine import api
    if api.is_xla_tensor(ext_tensor):
        return ext_tensor.detach()
    if isinstance(ext_tensor, DLPackExport):
        arr = ext_tensor.array
    elif type(ext_tensor).__name__ == "PyCapsule":
        arr = _capsule_to_jax(ext_tensor)
    elif isinstance(ext_tensor, torch.Tensor):
        arr = _torch_to_jax(ext_tensor)
    elif isinstance(ext_tensor, jax.Array):
        arr = ext_tensor
    elif hasattr(ext_tensor, "__dlpack__"):
        arr = jax.dlpack.from_dlpack(ext_tensor)
    else:
        raise TypeError("torch_xla.utils.dlpack.from_dlpack takes a DLPack capsule or an object with "
                        f"__dlpack__, got {type(ext_tensor).__name__}")
    dev = api.jax_device()
    if dev not in arr.devices():
        arr = jax.device_put(arr, dev)
    dtype = api.JAX_TO_TORCH[jnp.dtype(arr.dtype)]
    if jnp.dtype(arr.dtype) != api.to_jax(dtype):
        arr = arr.astype(api.to_jax(dtype))   # the storage type of this dtype
    return api.from_device_array(arr, dtype)


def install():
    """Route torch.utils.dlpack.to_dlpack of XLA tensors here (torch has no DLPack
    hook for a PrivateUse1 device). XLA tensors speak the protocol themselves."""
    global _orig_torch_to_dlpack
    if _orig_torch_to_dlpack is not None:
        return
    from ..engine import api
    XLATensor = api.tensor_class()
    orig = _orig_torch_to_dlpack = torch.utils.dlpack.to_dlpack

    def torch_to_dlpack(tensor):
        if isinstance(tensor, XLATensor):
            return to_dlpack(tensor)
        return orig(tensor)
    torch_to_dlpack.__doc__ = orig.__doc__
    torch.utils.dlpack.to_dlpack = torch_to_dlpack
