"""The `xla` device in PyTorch: PrivateUse1 renamed, with hooks, a device
guard, a device module (torch.xla) and PrivateUse1 kernels for factory ops.

A process started by a launcher (or in SPMD mode) has one device, `xla:0`; a
process alone on its host addresses every local device, `xla:0`..`xla:N-1`
(device_groups.py places ops once a second one is named).
"""
import contextlib
import random

import torch

from ..ops import checks, registry
from ..runtime import topology
from ..runtime.platform import jax_platform
from . import autocast, autograd_errors, device_groups, dispatch, serialize, tensor
from .device_groups import check_index
from .executor import wait_device_ops
from .handlers import random as device_random
from .tracing import OpInfo, trace_node, tracing_note, with_note, wrap
from .transfers import copy_, device_array

_registered = False
_lib = None
_cpu_lib = None


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self):
        return True

    def has_primary_context(self, dev_id):
        return True

    def is_built(self):
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


class _Stream:
    """The device's one stream: graphs run in the order they were issued, so
    waiting on another stream is free and synchronizing waits for the device.
    torch.distributed.checkpoint's writer copies tensors to the host under it."""
    device_type = "xla"

    def synchronize(self):
        wait_device_ops()

    def wait_stream(self, other):
        return None

    def wait_event(self, event):
        return None

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, _Stream)

    def __hash__(self):
        return hash(_Stream)


_STREAM = _Stream()


class DeviceModule:
    """What torch expects at torch.xla for a PrivateUse1 backend."""

    Stream = _Stream

    @staticmethod
    def current_stream(device=None):
        return _STREAM

    @staticmethod
    def stream(s=None):
        return contextlib.nullcontext(s)

    @staticmethod
    def is_available():
        # False on purpose: torch reads this to pick the process-wide accelerator
        # of plain CPU code. Were it True, nn.DataParallel would move a CPU model
        # onto XLA (and fail in its CUDA scatter), DataLoader would "pin" for us,
        # distributed checkpointing would stage through our streams, and torch's
        # device-generic tests would add a PRIVATEUSE1 copy of every XLA class.
        # Upstream's XLA is no torch accelerator, so none of that happens there;
        # XLA tensors are placed explicitly (torch_xla.device()).
        return False

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def _lazy_init():
        return None

    @staticmethod
    def device_count():
        return topology.addressable_device_count()

    @staticmethod
    def current_device():
        return topology.default_device_index()

    @staticmethod
    def set_device(device):
        index = device if isinstance(device, int) else device_groups.resolve(device)
        check_index(torch.device("xla", index))
        device_groups.set_default(index)

    @staticmethod
    def synchronize(device=None):
        wait_device_ops()

    @staticmethod
    def manual_seed(seed):
        device_random.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def seed():
        device_random.manual_seed(random.getrandbits(63))

    @staticmethod
    def initial_seed():
        return device_random.rng.initial

    @staticmethod
    def get_rng_state(device=None):
        return torch.tensor([device_random.get_rng_state()], dtype=torch.int64).view(torch.uint8)

    @staticmethod
    def set_rng_state(state, device=None):
        device_random.set_rng_state(int(state.view(torch.int64).tolist()[0]))

    @staticmethod
    def is_bf16_supported(including_emulation=True):
        return True

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def _is_autocast_enabled():
        return torch.is_autocast_enabled("xla")

    @staticmethod
    def get_autocast_dtype():
        return torch.get_autocast_dtype("xla")


_FACTORIES = (
    "empty.memory_format", "empty_strided", "arange", "arange.start", "arange.start_step",
    "linspace", "logspace", "eye", "eye.m", "full", "scalar_tensor", "zeros", "ones",
    "empty_permuted",
)


# factories whose only kernel is the CPU one get PrivateUse1 kernels too
_EXTRA_FACTORIES = ("tril_indices", "triu_indices", "_efficientzerotensor")


def _factory_impl(func):
    info = OpInfo(func._schema.name.split("::")[-1] + ("." + func._overloadname if func._overloadname != "default" else ""),
                  func, registry.find(func, jax_platform()))
    # factory sizes and ranges decide shapes: keep every number static
    info.scalar_pos = frozenset()
    info.scalar_kw = frozenset()
    # checks eager makes that no meta kernel does (a fill value that overflows the dtype)
    packet = func.overloadpacket.__name__
    always = packet in checks.ALWAYS

    def impl(*args, **kwargs):
        if info.lowering is None:
            raise RuntimeError(f"torch_xla: no lowering for factory aten::{info.name}")
        if always:
            msg = checks.diagnose(packet, args, kwargs)
            if msg is not None:
                raise with_note(RuntimeError(msg), tracing_note(info.name, args, kwargs))
        kwargs.pop("pin_memory", None)
        device = kwargs.get("device")
        check_index(device)
        if device_groups.active and device is not None:
            return device_groups.on_device(device_groups.resolve(device), _trace_factory, info, args, kwargs)
        node, e = trace_node(info, args, kwargs)
        return wrap(node, e)

    return impl   # argument errors are explained in make_entry (ops/checks.py)


def _trace_factory(info, args, kwargs):
    node, e = trace_node(info, args, kwargs)
    return wrap(node, e)


def _copy_from(src, dst, non_blocking=False):
    # reached when PyTorch copies into an XLA tensor below the Python key
    # (torch.tensor(data, device="xla"))
    return copy_((dst, src), {})


def _pin_memory_cpu(self, device=None):
    # With `xla` registered, PyTorch takes it as the current accelerator and
    # asks our hooks for a pinned-memory allocator, which a Python backend
    # cannot provide: DataLoader(pin_memory=True) would fail for every user of
    # this machine. Uploads go through JAX's host buffers, where pinning buys
    # nothing, so pinning for `xla` is an honest copy; any other device (a CUDA
    # build's `cuda`) keeps PyTorch's own pinned allocator.
    if device is None or device.type == "xla":
        if not torch.cuda.is_available():
            return self.clone()
        device = torch.device("cuda")
    return torch.ops.aten._pin_memory.default._op_dk(
        torch._C.DispatchKey.CompositeExplicitAutograd, self, device)


def register():
    global _registered, _lib, _cpu_lib
    if _registered:
        return
    if not hasattr(torch._C, "_acc"):
        raise ImportError("torch_xla needs torch>=2.10 (torch._C._acc for Python PrivateUse1 backends)")
    if torch._C._get_privateuse1_backend_name() != "xla":
        torch.utils.rename_privateuse1_backend("xla")
    torch._register_device_module("xla", DeviceModule())
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _lib = torch.library.Library("aten", "IMPL", "PrivateUse1")
    for name in _FACTORIES + _EXTRA_FACTORIES:
        func = registry._resolve(name if "." in name else name + ".default")
        if func is None:
            continue
        _lib.impl(name, _factory_impl(func))
    _cpu_lib = torch.library.Library("aten", "IMPL", "CPU")
    _cpu_lib.impl("_pin_memory", _pin_memory_cpu)
    tensor.set_default_device(torch.device("xla", 0))
    tensor.connect(dispatch.make_handler, device_array)
    _lib.impl("_copy_from", _copy_from)
    autograd_errors.install()
    serialize.install()
    autocast.register()
    _registered = True
