"""XLATensor: the lazy tensor PyTorch sees on the `xla` device.

Its state is one object, `t._lazy` (state.py: a Base holding its value, or a
View of one). `__torch_dispatch__` finds each aten op's handler in a table
filled on first use by the dispatcher the engine connects (`connect`), so
this module depends on nothing above the state.
"""
import gc
import importlib.machinery
import sys
import warnings
import weakref

import torch

from ..base.dtypes import NATURAL
from . import autograd_errors, serialize, state

_DEVICE = None  # the device new tensors get: torch.device("xla", 0) once PrivateUse1 is renamed


def _register_with_dynamo():
    """torch._dynamo has just been imported. Dynamo traces a tensor whose exact
    type is in its builder's type table (torch.Tensor, Parameter, ...) and
    treats a subclass with its own `__torch_dispatch__` as an opaque object.
    XLATensor joins that table, so Dynamo records XLA tensors as tensors on
    the `xla` device (their ops run on fake tensors) while the class keeps its
    real dispatcher: plain lazy tracing pays nothing for Dynamo (a metaclass
    hook that answered Dynamo's class check cost ~1.2 us per tensor made, and
    torch imports Dynamo on the first op anyway). Dynamo is also kept out of
    the engine's and JAX's frames: a sync or an op handler reached from
    compiled code runs as Python."""
    # runs inside the import of torch._dynamo: an error here must not break that import
    try:
        from torch._dynamo import trace_rules
        from torch._dynamo.variables.builder import VariableBuilder
        for trace_numpy in (False, True):
            table = VariableBuilder._type_dispatch_impl(trace_numpy)
            table[XLATensor] = table[torch.Tensor]
        for name in ("torch_xla", "jax", "jaxlib", "ml_dtypes", "opt_einsum"):
            trace_rules.add(name)
    except Exception as e:  # noqa: BLE001 - another torch version's internals
        warnings.warn(f"torch_xla: could not register XLA tensors with TorchDynamo ({e!r}); "
                      "torch.compile will not trace them", RuntimeWarning)
    _dynamo_registered.append(True)
    for hook in _dynamo_hooks:
        _run_hook(hook)


def _run_hook(hook):
    try:
        hook()
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"torch_xla: a TorchDynamo set-up step failed: {e!r}", RuntimeWarning)


_dynamo_registered = []
_dynamo_hooks = []   # run once Dynamo is imported (api.on_dynamo_import)


def on_dynamo_import(hook):
    """Run hook() once torch._dynamo has been imported (now, if it has)."""
    if _dynamo_registered:
        _run_hook(hook)
    else:
        _dynamo_hooks.append(hook)


class _DynamoImportWatch:
    """A sys.meta_path entry that runs `_register_with_dynamo` right after
    torch._dynamo finishes importing (it finds the module through the normal
    path finder and wraps only that module's loader)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(_DynamoImportWatch)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            _registration_pending.append(True)   # unusual install: register at first compile
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register_with_dynamo()

        spec.loader.exec_module = exec_module   # this spec's own loader object
        return spec


_registration_pending = []


def ensure_dynamo_registration():
    """Register with Dynamo now if the import watch could not (idempotent)."""
    if _registration_pending and "torch._dynamo" in sys.modules:
        _registration_pending.clear()
        _register_with_dynamo()


class _ModuleApplySwap:
    """A class attribute that exists only when nn.Module._apply asks (through
    is_traceable_wrapper_subclass) about an XLA tensor over device data."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is not None and _swappable(obj):
            f = _module_apply_frame()
            if f is not None and _original_swappable(f):
                return _refuse_flatten
        raise AttributeError(self.name)


def _module_apply_frame():
    code = _APPLY_CODE
    # __get__ <- hasattr <- (_has_traceable_wrapper_subclass_protocol <-)
    # is_traceable_wrapper_subclass <- Module._apply
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return None
        if f.f_code is code:
            return f
        f = f.f_back
    return None


def _original_swappable(frame):
    """Whether _apply may swap the device tensor into the CPU Parameter it moves."""
    # swap_tensors refuses a tensor someone holds a weak reference to; then the
    # Parameter is replaced as before (untied, but moved)
    param = frame.f_locals.get("param")
    # only a move onto the device (XLA to XLA keeps the usual path)
    if param is None or type(param) is XLATensor or weakref.getweakrefcount(param):
        return False
    grad = param.grad
    if grad is not None and weakref.getweakrefcount(grad):
        return False
    if param._use_count() > 1:
        _detach_from_graphs(param, grad)
    return True


def _detach_from_graphs(param, grad):
    """Give `param` a fresh tensor of the same value, so the autograd graphs that
    hold its old one (a CPU forward pass before the move) keep that one.

    swap_tensors refuses a tensor another owner references (a graph's saved
    tensors, its AccumulateGrad node); eager CUDA moves such a Parameter with
    `.data =` and keeps its identity. The old tensor stays with the graphs,
    which run on the CPU values they were built from."""
    fresh = param.detach().clone()
    fresh.requires_grad_(param.requires_grad)
    if grad is not None:
        param.grad = None
    torch._C._swap_tensor_impl(param, fresh)
    if grad is not None:
        param.grad = grad


_APPLY_CODE = torch.nn.Module._apply.__code__


def _swappable(t):
    # a base over device data (a fresh upload): the Parameter made of it is a
    # plain alias
    s = t.__dict__.get("_lazy")
    return type(s) is state.Base and s.value[0].kind == state._DATA


def _refuse_flatten(*args, **kwargs):
    raise TypeError("XLA tensors are not traceable wrapper subclasses")


class XLATensor(torch.Tensor):
    # Python-level torch functions go straight to C++; all the work is in dispatch.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, *args, **kwargs):
        raise TypeError("XLATensor is made by torch_xla; use tensor.to('xla')")

    # the SPMD annotation (a jax sharding) handlers/sharding.py gives a tensor; None: none
    _sharding = None

    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is _DETACH and type(args[0]) is XLATensor:
            # autograd detaches every output it saves and again when it unpacks one, and
            # each gradient it stores (shallow_copy_and_detach of a Python tensor): an
            # alias of a base, made here with no handler lookup (views.alias otherwise)
            x = args[0]
            s = x._lazy
            if type(s) is state.Base:
                out = new_view(s, (), s.aval, s.value, s.gen)
                if x._sharding is not None:   # same value, same layout (x.grad keeps it)
                    out._sharding = x._sharding
                return out
        if len(types) > 1 and any(ty is not XLATensor for ty in types):
            return NotImplemented   # a wrapper subclass among the args (XLAShardedTensor) unwraps first
        h = _handlers.get(func)
        if h is None:
            h = _handlers[func] = _connected.make_handler(func)
        try:
            return h(args, kwargs or {})
        except Exception as e:
            if not autograd_errors.on_worker_thread():
                raise
            return autograd_errors.defer(func, args, kwargs or {}, e)

    __torch_dispatch__ = classmethod(__torch_dispatch__)

    # nn.Module._apply (model.to(xla)) replaces a Parameter it cannot shallow-copy
    # into by a new one, which unties shared weights (GPT-2's lm_head and wte);
    # for a tensor it takes for a traceable subclass it swaps the new content into
    # the existing Parameter instead (torch.utils.swap_tensors), keeping identity
    # and so ties, as eager CUDA does. These two attributes answer that question
    # for _apply's own check only: every other caller (Dynamo, AOTAutograd, a
    # type-level check) finds no such attribute.
    __tensor_flatten__ = _ModuleApplySwap("__tensor_flatten__")
    __tensor_unflatten__ = _ModuleApplySwap("__tensor_unflatten__")

    def __repr__(self, *, tensor_contents=None):
        cpu = self.detach().cpu()
        contents = torch._tensor_str._tensor_str(cpu, len("tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        return "tensor(" + text[len(type(self).__name__) + 1:]

    __str__ = __repr__

    # DLPack producer: the device buffer of the current value, in the PyTorch dtype
    # (jax.dlpack.from_dlpack(t), torch.from_dlpack(t))
    def __dlpack__(self, *args, **kwargs):
        arr = export_array(self)
        try:
            return arr.__dlpack__(*args, **kwargs)
        except TypeError:
            return arr.__dlpack__()

    def __dlpack_device__(self):
        return export_array(self).__dlpack_device__()

    @property
    def is_xla(self):
        # PyTorch's own flag tests its built-in XLA key; this device is PrivateUse1 named xla
        return True

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    # `t.data = other`: t takes other's shape and dtype and reads other's storage
    # from now on, as in eager PyTorch (an in-place change of either shows in both)
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, XLATensor):
            raise RuntimeError(
                f"torch_xla: `tensor.data = other` needs other on the XLA device too, got a {new.device} "
                "tensor; use other.to('xla')")
        torch._C.TensorBase.data.__set__(self, new)  # sizes, strides, dtype (and PyTorch's own checks)
        state.share(self, new)

    def tolist(self):
        return self.detach().cpu().tolist()

    def numpy(self, *, force=False):
        if not force:
            raise TypeError(
                "can't convert xla:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        return self.detach().cpu().numpy()

    def __reduce_ex__(self, proto):
        # torch.save stores the CPU copy and the device; torch.load brings it back
        # there (map_location="cpu" keeps it on the CPU): serialize.py
        return serialize.reduce(self, proto)

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # AOTAutograd (torch.compile training) checks a tangent's class against the
        # plain torch.Tensor it traced with (see _register_with_dynamo): an XLA tensor is one
        return self

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            out = self.clone()
        out.requires_grad_(self.requires_grad)
        memo[id(self)] = out
        return out


class _Connected:
    """What the tensor needs from the layers above it, given once by `connect`."""
    make_handler = None   # aten op -> handler(args, kwargs)  (dispatch.make_handler)
    device_array = None   # tensor -> the jax.Array of its value  (transfers.device_array)


_connected = _Connected()


def connect(make_handler, device_array):
    """Give the tensor class its dispatcher and its way to compute a value
    (the engine's start-up does this once, before the first op)."""
    _connected.make_handler = make_handler
    _connected.device_array = device_array


_handlers = {}   # aten op -> handler, filled on the first call of each op
_DETACH = torch.ops.aten.detach.default
_make = torch.Tensor._make_wrapper_subclass
_make_base = state.make_base
_make_view = state.make_view


def set_default_device(device):
    """The torch.device new tensors get (xla:0, or another while several are in use)."""
    global _DEVICE
    _DEVICE = device


def default_device():
    return _DEVICE


def new_base(v, aval, device=None):
    """Wrap IR value v (node, index) with aval (shape, dtype) as a base tensor
    (on `device`, by default the one the op being traced works on)."""
    device = device or _DEVICE
    t = _make(XLATensor, aval[0], dtype=aval[1], device=device)
    _make_base(t, v, aval, device.index or 0)
    return t


def new_view(base, chain, aval, v, gen, geom=None):
    """A view of Base `base` through `chain` (view steps), with value v computed at
    the base's generation `gen`. geom: (strides, storage_offset) the view has in
    eager PyTorch (None: contiguous)."""
    if geom is None:
        t = _make(XLATensor, aval[0], dtype=aval[1], device=_DEVICE)
    else:
        t = _make(XLATensor, aval[0], strides=geom[0], storage_offset=geom[1], dtype=aval[1], device=_DEVICE)
    _make_view(t, base, chain, aval, v, gen)
    return t


def live_tensors():
    """Every live XLA tensor (one walk of the collector's objects: not for hot paths)."""
    return [o for o in gc.get_objects() if type(o) is XLATensor]


def export_array(t):
    """The jax.Array of t's value in its PyTorch dtype (XLA_USE_BF16 and friends
    narrow the storage type; DLPack consumers get the natural one)."""
    arr = _connected.device_array(t)
    nat = NATURAL.get(t.dtype)
    if nat is not None and arr.dtype != nat:
        arr = arr.astype(nat)
    return arr


if "torch._dynamo" in sys.modules:
    _register_with_dynamo()
else:
    sys.meta_path.insert(0, _DynamoImportWatch)


# -- which dispatcher runs: lazy tracing, with optional wrappers ------------------------

_lazy_dispatch = XLATensor.__dict__["__torch_dispatch__"].__func__
_wrappers = {"eager": None, "placement": None}


def _install_dispatch():
    fn = _lazy_dispatch
    for role in ("eager", "placement"):   # placement outermost
        wrap_with = _wrappers[role]
        if wrap_with is not None:
            fn = _wrapped(wrap_with, fn)
    XLATensor.__torch_dispatch__ = classmethod(fn)


def _wrapped(wrap_with, inner):
    def fn(cls, func, types, args=(), kwargs=None):
        return wrap_with(inner, cls, func, types, args, kwargs)
    return fn


def set_dispatch_wrapper(role, wrapper):
    """Route every op through wrapper(inner, cls, func, types, args, kwargs):
    role "eager" (run each top-level op at once) or "placement" (several devices
    in one process); None removes it. Swapped rather than tested per op, so lazy
    tracing pays nothing for either."""
    if role not in _wrappers:
        raise ValueError(f"unknown dispatch wrapper role {role!r}")
    _wrappers[role] = wrapper
    _install_dispatch()
