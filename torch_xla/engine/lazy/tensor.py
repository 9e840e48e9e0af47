"""XLATensor: the lazy tensor PyTorch sees on the `xla` device.

A base tensor holds `_v`, an IR value (node, index): device data once
executed, an op node while pending. A view holds `_base` (its root base) and
`_chain` (the view steps from the base); its value is re-derived from the
base whenever the base has changed since (see views.py). `_gen` counts a
base's mutations.
"""
import importlib.machinery
import sys
import weakref

import torch

from . import autograd_errors, mode, tracing

_DEVICE = None  # torch.device("xla", 0), set once PrivateUse1 is renamed (device.register)


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
        import warnings
        warnings.warn(f"torch_xla: could not register XLA tensors with TorchDynamo ({e!r}); "
                      "torch.compile will not trace them", RuntimeWarning)
    _dynamo_registered.append(True)
    for hook in _dynamo_hooks:
        _run_hook(hook)


def _run_hook(hook):
    try:
        hook()
    except Exception as e:  # noqa: BLE001
        import warnings
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
    # swap_tensors refuses a tensor someone holds a weak reference to; then the
    # Parameter is replaced as before (untied, but moved)
    param = frame.f_locals.get("param")
    # only a move onto the device (XLA to XLA keeps the usual path)
    if param is None or type(param) is XLATensor or weakref.getweakrefcount(param):
        return False
    grad = param.grad
    return grad is None or not weakref.getweakrefcount(grad)


_APPLY_CODE = torch.nn.Module._apply.__code__
_DATA_KIND = 0   # ir.node.DATA (this module imports no IR at load time)


def _swappable(t):
    # a base over device data (a fresh upload): the Parameter made of it is a
    # plain alias, with no weak reference that would stop swap_tensors
    return getattr(t, "_xb", 1) is None and t._v[0].kind == _DATA_KIND


def _refuse_flatten(*args, **kwargs):
    raise TypeError("XLA tensors are not traceable wrapper subclasses")


class XLATensor(torch.Tensor):
    # Python-level torch functions go straight to C++; all the work is in dispatch.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, *args, **kwargs):
        raise TypeError("XLATensor is made by torch_xla; use tensor.to('xla')")

    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if len(types) > 1 and any(ty is not XLATensor for ty in types):
            return NotImplemented   # a wrapper subclass among the args (XLAShardedTensor) unwraps first
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
        # torch.save stores the CPU copy and the device; torch.load brings it back
        # there (map_location="cpu" keeps it on the CPU): serialize.py
        from .serialize import reduce
        return reduce(self, proto)

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


_handlers = {}
_make = torch.Tensor._make_wrapper_subclass
pending = []  # weakrefs to base tensors that became pending since the last barrier
_ref = weakref.ref
# weakrefs to views whose value was derived from pending IR since the last barrier:
# a full barrier computes the live ones beside their bases (as upstream syncs every
# live tensor), so later graphs read them as data instead of re-deriving them
pending_views = []
_retired = [0]  # entries of `pending` dropped so far (CreateXlaTensor reads the total)


def retire_pending(keep=None):
    """Empty `pending` (or keep the refs `keep` lists), counting what leaves."""
    n = len(pending)
    if keep is None:
        pending.clear()
    else:
        pending[:] = keep
    _retired[0] += n - len(pending)


def drop_last_pending(t):
    """Forget t's pending entry when it is the latest one (O(1); counted as retired)."""
    if pending and pending[-1]() is t:
        pending.pop()
        _retired[0] += 1


def pending_total():
    """How many tensors became pending since the process started."""
    return _retired[0] + len(pending)


def new_base(v, aval, device=None):
    """Wrap IR value v (node, index) with aval (shape, dtype) as a base tensor
    (on `device`, by default the one the op being traced works on)."""
    t = _make(XLATensor, aval[0], dtype=aval[1], device=device or _DEVICE)
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
    if v[0].kind == 2:
        pending_views.append(_ref(t))
    return t


tracing._XLATensor = XLATensor

if "torch._dynamo" in sys.modules:
    _register_with_dynamo()
else:
    sys.meta_path.insert(0, _DynamoImportWatch)


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


_eager_on = [False]
_wrapper = [None]


def _install_dispatch():
    base = _eager_dispatch if _eager_on[0] else _lazy_dispatch
    wrap_with = _wrapper[0]
    if wrap_with is None:
        fn = base
    else:
        def fn(cls, func, types, args=(), kwargs=None):
            return wrap_with(base, cls, func, types, args, kwargs)
    XLATensor.__torch_dispatch__ = classmethod(fn)


def use_eager_dispatch(enable):
    """Which dispatch XLATensor uses: per-op execution (eager) or lazy tracing.
    Swapped rather than tested per op, so lazy tracing pays nothing for eager mode."""
    _eager_on[0] = bool(enable)
    _install_dispatch()


def set_dispatch_wrapper(wrapper):
    """Route every op through wrapper(inner, cls, func, types, args, kwargs)
    (device placement, once several devices are in use); None removes it."""
    _wrapper[0] = wrapper
    _install_dispatch()
