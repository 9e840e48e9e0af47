"""XLATensor: the lazy tensor PyTorch sees on the `xla` device.

A base tensor holds `_v`, an IR value (node, index): device data once
executed, an op node while pending. A view holds `_base` (its root base) and
`_chain` (the view steps from the base); its value is re-derived from the
base whenever the base has changed since (see views.py). `_gen` counts a
base's mutations.
"""
import os
import sys
import weakref

import torch

from . import autograd_errors, mode, tracing

_DEVICE = None  # torch.device("xla", 0), set once PrivateUse1 is renamed (device.register)
_PLAIN_DISPATCH = torch.Tensor.__torch_dispatch__


class _XLATensorMeta(type(torch.Tensor)):
    """XLATensor's metaclass. TorchDynamo traces a tensor whose class keeps
    torch.Tensor's `__torch_dispatch__` and treats any other subclass as an
    opaque object. Once torch._dynamo is imported, the class answers
    `__torch_dispatch__` with torch.Tensor's while Dynamo traces (a
    TracingContext is active) and the one asking is Dynamo's own code, so
    Dynamo records XLA tensors as tensors on the `xla` device (their ops run on fake tensors); at any other time the real
    dispatcher is returned. Until then the metaclass adds nothing: lazy
    tracing of a program that never imports Dynamo pays no lookup."""


def _getattribute_under_dynamo(cls, name):
    if (name == "__torch_dispatch__" and getattr(_tls[0], "tracing_context", None) is not None
            and _DYNAMO_DIR in sys._getframe(1).f_code.co_filename):
        # Dynamo's own check (variables/builder.py); PyTorch's C++ (making a tensor,
        # dispatching an op, e.g. a fake-tensor fallback running on real XLA tensors)
        # is called from other frames and gets the real dispatcher
        if not _skipped:
            _skip_engine()
        return _PLAIN_DISPATCH
    return type.__getattribute__(cls, name)


_tls = [None]
_DYNAMO_DIR = os.path.join("torch", "_dynamo", "")


def _dynamo_imported():
    """torch._dynamo is being imported: switch the class lookup on, and keep
    Dynamo out of the engine's own frames (they always run as Python)."""
    if _tls[0] is not None:
        return
    import torch._guards as guards
    _tls[0] = guards._TLS
    _XLATensorMeta.__getattribute__ = _getattribute_under_dynamo


class _DynamoImportWatch:
    """A sys.meta_path entry that only notices the import of torch._dynamo
    (and finds nothing itself)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch._dynamo":
            sys.meta_path.remove(_DynamoImportWatch)
            _dynamo_imported()
        return None


def _skip_engine():
    """Dynamo must not trace torch_xla's own frames, nor JAX's that they call
    (a sync or an op handler reached from compiled code runs as Python)."""
    _skipped.append(True)
    from torch._dynamo import trace_rules
    for name in ("torch_xla", "jax", "jaxlib", "ml_dtypes", "opt_einsum"):
        trace_rules.add(name)


_skipped = []


if "torch._dynamo" in sys.modules:
    _dynamo_imported()
else:
    sys.meta_path.insert(0, _DynamoImportWatch)


class XLATensor(torch.Tensor, metaclass=_XLATensorMeta):
    # Python-level torch functions go straight to C++; all the work is in dispatch.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, *args, **kwargs):
        raise TypeError("XLATensor is made by torch_xla; use tensor.to('xla')")

    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        h = _handlers.get(func)
        if h is None:
            from .dispatch import make_handler
            h = _handlers[func] = make_handler(func)
        try:
            return h(args, kwargs or {})
        except Exception as e:
            if not autograd_errors.on_worker_thread():
                raise
            return autograd_errors.defer(func, args, kwargs or {}, e)

    __torch_dispatch__ = classmethod(__torch_dispatch__)

    def __repr__(self, *, tensor_contents=None):
        from .transfers import to_cpu
        cpu = to_cpu(self)
        contents = torch._tensor_str._tensor_str(cpu, len("tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        return "tensor(" + text[len(type(self).__name__) + 1:]

    __str__ = __repr__

    # DLPack producer: the device buffer of the current value, in the PyTorch dtype
    # (jax.dlpack.from_dlpack(t), torch.from_dlpack(t))
    def __dlpack__(self, *args, **kwargs):
        arr = _export_array(self)
        try:
            return arr.__dlpack__(*args, **kwargs)
        except TypeError:
            return arr.__dlpack__()

    def __dlpack_device__(self):
        return _export_array(self).__dlpack_device__()

    @property
    def is_xla(self):
        # PyTorch's own flag tests its built-in XLA key; this device is PrivateUse1 named xla
        return True

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    # `t.data = other` must carry the lazy value too (views.set_data)
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        from .views import set_data
        set_data(self, new)

    def tolist(self):
        from .transfers import to_cpu
        return to_cpu(self).tolist()

    def numpy(self, *, force=False):
        if not force:
            raise TypeError(
                "can't convert xla:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        return self.cpu().numpy()

    def __reduce_ex__(self, proto):
        # torch.save stores XLA tensors as CPU tensors: the file loads anywhere,
        # with weights_only=True too; move them back with .to("xla")
        from .transfers import to_cpu
        cpu = to_cpu(self)
        if self.requires_grad:
            cpu.requires_grad_(True)
        return cpu.__reduce_ex__(proto)

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # AOTAutograd (torch.compile training) checks a tangent's class against the
        # plain torch.Tensor it traced with (see _XLATensorMeta): an XLA tensor is one
        return self

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            out = self.clone()
        out.requires_grad_(self.requires_grad)
        memo[id(self)] = out
        return out


_handlers = {}
_make = torch.Tensor._make_wrapper_subclass
pending = []  # weakrefs to base tensors that became pending since the last barrier
_ref = weakref.ref


def new_base(v, aval):
    """Wrap IR value v (node, index) with aval (shape, dtype) as a base tensor."""
    t = _make(XLATensor, aval[0], dtype=aval[1], device=_DEVICE)
    t._v = v
    t._aval = aval
    t._xb = None
    t._gen = 0
    if v[0].kind == 2:
        pending.append(_ref(t))
    return t


def new_view(base, chain, aval, v, gen, geom=None):
    """geom: (strides, storage_offset) the view has in eager PyTorch (None: contiguous)."""
    if geom is None:
        t = _make(XLATensor, aval[0], dtype=aval[1], device=_DEVICE)
    else:
        t = _make(XLATensor, aval[0], strides=geom[0], storage_offset=geom[1], dtype=aval[1], device=_DEVICE)
    t._v = v
    t._aval = aval
    t._xb = base
    t._chain = chain
    t._vgen = gen
    return t


tracing._XLATensor = XLATensor


def _export_array(t):
    import jax.numpy as jnp
    from ..base.dtypes import NATURAL
    from .transfers import device_array
    arr = device_array(t)
    nat = NATURAL.get(t.dtype)
    if nat is not None and jnp.dtype(arr.dtype) != nat:
        arr = arr.astype(nat)   # XLA_USE_BF16 and friends narrow the storage type
    return arr


_lazy_dispatch = XLATensor.__dict__["__torch_dispatch__"].__func__


def _eager_dispatch(cls, func, types, args=(), kwargs=None):
    # eager mode: run the pending graph after each top-level op
    st = mode.state
    depth = st.depth
    st.depth = depth + 1
    try:
        out = _lazy_dispatch(cls, func, types, args, kwargs)
    finally:
        st.depth = depth
    if depth == 0 and not st.lazy_region:
        mode.run_eager_op()
    return out


def use_eager_dispatch(enable):
    """Which dispatch XLATensor uses: per-op execution (eager) or lazy tracing.
    Swapped rather than tested per op, so lazy tracing pays nothing for eager mode."""
    XLATensor.__torch_dispatch__ = classmethod(_eager_dispatch if enable else _lazy_dispatch)
