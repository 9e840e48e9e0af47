"""torch_xla.utils.dlpack: zero-copy exchange of XLA tensors through DLPack.

PyTorch's own `torch.utils.dlpack` calls into this module for xla tensors."""
import torch


def to_dlpack(xla_tensor):
    """A DLPack capsule for the device buffer behind `xla_tensor` (runs pending ops first)."""
    from ..engine import api
    arr = api.device_array(xla_tensor)
    return arr.__dlpack__()


def from_dlpack(ext_tensor):
    """An XLA tensor from a DLPack capsule or an object with __dlpack__."""
    import jax
    import jax.numpy as jnp
    from ..engine import api
    if not hasattr(ext_tensor, "__dlpack__"):
        raise TypeError("torch_xla.utils.dlpack.from_dlpack takes an object with __dlpack__ "
                        "(a torch or jax array); bare DLPack capsules are not accepted by JAX")
    if isinstance(ext_tensor, torch.Tensor) and ext_tensor.device.type == "cpu":
        arr = jax.device_put(jnp.asarray(ext_tensor.numpy()), api.jax_device())
    else:
        arr = jax.device_put(jax.dlpack.from_dlpack(ext_tensor), api.jax_device())
    return api.from_device_array(arr, api.JAX_TO_TORCH[jnp.dtype(arr.dtype)])
