"""DLPack between XLA tensors, JAX arrays and torch CPU tensors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.utils.dlpack as xdlpack


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float16])
def test_xla_to_jax_and_back(dev, dtype):
    cpu = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
    t = (cpu.to(dev) * 1).to(dtype)       # a pending value: to_dlpack runs it first
    arr = jax.dlpack.from_dlpack(xdlpack.to_dlpack(t))
    assert arr.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(arr.astype(jnp.float32)), cpu.float().numpy())
    back = xdlpack.from_dlpack(arr * 2 if dtype != torch.bool else arr)
    assert back.device.type == "xla" and back.dtype == dtype
    want = cpu * 2 if dtype != torch.bool else cpu
    torch.testing.assert_close(back.cpu(), want)
    # the protocol on the tensor itself
    arr2 = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(arr2.astype(jnp.float32)), cpu.float().numpy())


def test_torch_utils_dlpack_of_xla_tensor(dev):
    cpu = torch.randn(2, 5)
    t = cpu.to(dev) + 1
    cap = torch.utils.dlpack.to_dlpack(t)
    u = torch.utils.dlpack.from_dlpack(cap)
    assert u.device.type in ("cpu", "cuda")
    torch.testing.assert_close(u.cpu(), cpu + 1)
    torch.testing.assert_close(torch.from_dlpack(xdlpack.to_dlpack(t)).cpu(), cpu + 1)
    # a CPU tensor still gets torch's own capsule
    assert type(torch.utils.dlpack.to_dlpack(cpu)).__name__ == "PyCapsule"


def test_from_capsule_and_cpu_tensor(dev):
    cpu = torch.randn(4, 3)
    a = xdlpack.from_dlpack(torch.utils.dlpack.to_dlpack(cpu))      # a bare capsule
    b = xdlpack.from_dlpack(cpu)                                    # a torch CPU tensor
    c = xdlpack.from_dlpack(xdlpack.to_dlpack(cpu.to(dev)).capsule())  # our own export as a capsule
    for x in (a, b, c):
        assert x.device.type == "xla"
        torch.testing.assert_close(x.cpu(), cpu)
        torch.testing.assert_close((x * 2).cpu(), cpu * 2)   # usable in graphs
    with pytest.raises(TypeError):
        xdlpack.from_dlpack([1, 2])
    with pytest.raises(TypeError):
        xdlpack.to_dlpack(cpu)


def test_jax_round_trip_no_copy_on_cpu(dev):
    if jax.devices()[0].platform != "cpu":
        pytest.skip("checks buffer sharing on the CPU platform")
    arr = jnp.arange(8.0)
    t = xdlpack.from_dlpack(arr)
    back = jax.dlpack.from_dlpack(xdlpack.to_dlpack(t))
    assert back.unsafe_buffer_pointer() == arr.unsafe_buffer_pointer()
