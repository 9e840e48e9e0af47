"""torch <-> JAX/numpy dtype maps."""

import jax.numpy as jnp
import ml_dtypes

from . import config
import numpy as np
import torch

TORCH_TO_JAX = {
    torch.float32: jnp.dtype(jnp.float32),
    torch.float64: jnp.dtype(jnp.float64),
    torch.float16: jnp.dtype(jnp.float16),
    torch.bfloat16: jnp.dtype(jnp.bfloat16),
    torch.int64: jnp.dtype(jnp.int64),
    torch.int32: jnp.dtype(jnp.int32),
    torch.int16: jnp.dtype(jnp.int16),
    torch.int8: jnp.dtype(jnp.int8),
    torch.uint8: jnp.dtype(jnp.uint8),
    torch.bool: jnp.dtype(jnp.bool_),
    torch.complex64: jnp.dtype(jnp.complex64),
    torch.complex128: jnp.dtype(jnp.complex128),
}
for _name, _np in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
    if hasattr(torch, _name):
        TORCH_TO_JAX[getattr(torch, _name)] = jnp.dtype(_np)
for _name, _ml in (("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e5m2")):
    if hasattr(torch, _name) and hasattr(ml_dtypes, _ml):
        TORCH_TO_JAX[getattr(torch, _name)] = jnp.dtype(getattr(ml_dtypes, _ml))

JAX_TO_TORCH = {v: k for k, v in TORCH_TO_JAX.items()}

# The natural JAX dtype of each torch dtype (what host arrays use). TORCH_TO_JAX
# below is the device *storage* type, which the env vars may narrow: tensors
# keep reporting their PyTorch dtype and come back to the CPU in it; the
# lowerings see the storage type through ctx.entry.out_dtype() (to_jax).
NATURAL = dict(TORCH_TO_JAX)
# XLA has no complex32: stored (and moved) as complex64
TORCH_TO_JAX[torch.complex32] = NATURAL[torch.complex32] = jnp.dtype(jnp.complex64)


def _env(name):
    return config.read(name)


class _StorageTypes(dict):
    """TORCH_TO_JAX. The 64-bit integer types are decided at their first device use:
    XLA_USE_32BIT_LONG=1 stores them as 32-bit (upstream also reads it when it
    first maps such a type, not at import)."""

    def __missing__(self, dt):
        longs = _LONGS.get(dt)
        if longs is None:
            raise KeyError(dt)
        narrow = _env("XLA_USE_32BIT_LONG")
        for t, (wide, narrowed) in _LONGS.items():
            self[t] = narrowed if narrow else wide
        return self[dt]

    def get(self, dt, default=None):
        try:
            return self[dt]
        except KeyError:
            return default


_LONGS = {t: (TORCH_TO_JAX.pop(t), jnp.dtype(n))
          for t, n in ((torch.int64, jnp.int32), (getattr(torch, "uint64", None), jnp.uint32))
          if t in TORCH_TO_JAX}
TORCH_TO_JAX = _StorageTypes(TORCH_TO_JAX)


USE_BF16 = DOWNCAST_BF16 = USE_FP16 = DOWNCAST_FP16 = STORAGE_NARROWED = False
_settled = []


def settle():
    """Fix the device storage types from XLA_USE_BF16 and friends. Read at first use,
    as upstream reads them, not at import: Lightning's XLAPrecision("bf16-true") sets
    XLA_USE_BF16 after torch_xla is imported and before the model moves."""
    global USE_BF16, DOWNCAST_BF16, USE_FP16, DOWNCAST_FP16, STORAGE_NARROWED
    if _settled:
        return
    _settled.append(True)
    USE_BF16 = _env("XLA_USE_BF16")
    DOWNCAST_BF16 = _env("XLA_DOWNCAST_BF16")
    USE_FP16 = _env("XLA_USE_FP16") or _env("XLA_USE_F16")
    DOWNCAST_FP16 = _env("XLA_DOWNCAST_FP16")
    if USE_BF16:
        TORCH_TO_JAX[torch.float32] = TORCH_TO_JAX[torch.float64] = jnp.dtype(jnp.bfloat16)
    elif DOWNCAST_BF16:
        TORCH_TO_JAX[torch.float32] = jnp.dtype(jnp.bfloat16)
        TORCH_TO_JAX[torch.float64] = jnp.dtype(jnp.float32)
    elif USE_FP16:
        TORCH_TO_JAX[torch.float32] = TORCH_TO_JAX[torch.float64] = jnp.dtype(jnp.float16)
    elif DOWNCAST_FP16:
        TORCH_TO_JAX[torch.float32] = jnp.dtype(jnp.float16)
        TORCH_TO_JAX[torch.float64] = jnp.dtype(jnp.float32)
    STORAGE_NARROWED = any(TORCH_TO_JAX[k] != NATURAL[k] for k in NATURAL if k in TORCH_TO_JAX)


# numpy dtypes torch.from_numpy cannot take are moved as same-width ints
_VIEW_AS = {torch.bfloat16: (np.uint16, torch.int16), torch.float16: (None, None)}


def to_jax(dt):
    if not _settled:
        settle()
    try:
        return TORCH_TO_JAX[dt]
    except KeyError:
        raise TypeError(f"torch_xla: dtype {dt} is not supported on the XLA device") from None


def storage_array(arr, dtype):
    """Host numpy array of torch dtype `dtype` -> the array in its device storage type."""
    if not _settled:
        settle()
    st = TORCH_TO_JAX.get(dtype)
    if st is not None and arr.dtype != st:
        return arr.astype(st)
    return arr


def numpy_to_torch(arr, dtype):
    """numpy array (of to_jax(dtype), the storage type) -> CPU torch tensor of `dtype`, owning its memory."""
    nat = NATURAL.get(dtype)
    if nat is not None and arr.dtype != nat:
        arr = np.asarray(arr).astype(nat)
    if dtype == torch.complex32:
        return torch.from_numpy(np.array(arr)).to(torch.complex32)
    if dtype == torch.bfloat16 or (getattr(torch, "float8_e4m3fn", None) is not None
                                   and dtype in (getattr(torch, "float8_e4m3fn"), getattr(torch, "float8_e5m2", None))):
        width = arr.dtype.itemsize
        ints = {1: (np.uint8, torch.uint8), 2: (np.int16, torch.int16)}[width]
        return torch.from_numpy(np.array(arr).view(ints[0])).view(dtype)
    if dtype in (getattr(torch, "uint16", None), getattr(torch, "uint32", None), getattr(torch, "uint64", None)):
        return torch.from_numpy(np.array(arr)).view(dtype) if hasattr(torch, "uint16") else torch.from_numpy(np.array(arr))
    return torch.from_numpy(np.array(arr))


def torch_to_numpy(t):
    """CPU torch tensor -> numpy array in the matching JAX dtype."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(jnp.bfloat16)
    if t.dtype == torch.complex32:
        return t.to(torch.complex64).numpy()
    jd = TORCH_TO_JAX.get(t.dtype)
    if jd is not None and jd.name.startswith("float8"):
        return t.contiguous().view(torch.uint8).numpy().view(jd)
    return t.contiguous().numpy()
