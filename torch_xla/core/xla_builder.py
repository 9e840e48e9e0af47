"""Building XLA computations by hand, and running JAX functions on XLA tensors.

`Op` is one value of a computation under construction: arithmetic, comparisons,
shape ops, `cast`, `select`, `mkconditional`, `mkwhile`, ... Here an `Op` holds a
JAX value (a traced array, or a tuple of `Op` values) and each method is the matching
`jax.numpy` / `jax.lax` operation, so a computation is an ordinary JAX function.
`torch_xla.core.xla_op_registry.register(name, fn)` turns such a function of
`Op` values into a callable on XLA tensors.

`call_jax(jax_fn, args, kwargs)` runs a JAX function on XLA tensors as one node
of the lazy graph, differentiable through `jax.vjp`
(torch_xla.experimental.jax_interop); user computations and registered ops go
through it.
"""
import numpy as np
import torch

import jax
import jax.numpy as jnp
from jax import lax


class Type:
    F32 = "f32"
    F64 = "f64"
    BF16 = "bf16"
    F16 = "f16"
    U8 = "u8"
    S8 = "s8"
    U16 = "u16"
    S16 = "s16"
    U32 = "u32"
    S32 = "s32"
    U64 = "u64"
    S64 = "s64"
    C64 = "c64"
    C128 = "c128"
    PRED = "pred"


_XLA_PT_TYPE_MAP = {
    Type.F32: torch.float32, Type.F64: torch.float64, Type.BF16: torch.bfloat16,
    Type.F16: torch.float16, Type.U8: torch.uint8, Type.S8: torch.int8,
    Type.U16: torch.uint16, Type.S16: torch.int16, Type.U32: torch.uint32,
    Type.S32: torch.int32, Type.U64: torch.uint64, Type.S64: torch.int64,
    Type.C64: torch.complex64, Type.C128: torch.complex128, Type.PRED: torch.bool,
}
_PT_XLA_TYPE_MAP = {v: k for k, v in _XLA_PT_TYPE_MAP.items()}

_JNP_OF_TYPE = {
    Type.F32: jnp.float32, Type.F64: jnp.float64, Type.BF16: jnp.bfloat16,
    Type.F16: jnp.float16, Type.U8: jnp.uint8, Type.S8: jnp.int8,
    Type.U16: jnp.uint16, Type.S16: jnp.int16, Type.U32: jnp.uint32,
    Type.S32: jnp.int32, Type.U64: jnp.uint64, Type.S64: jnp.int64,
    Type.C64: jnp.complex64, Type.C128: jnp.complex128, Type.PRED: jnp.bool_,
}
_TYPE_OF_JNP = {jnp.dtype(v): k for k, v in _JNP_OF_TYPE.items()}


def _jnp_dtype(t):
    if t is None:
        return None
    if isinstance(t, torch.dtype):
        t = _PT_XLA_TYPE_MAP[t]
    if isinstance(t, str):
        return jnp.dtype(_JNP_OF_TYPE[t])
    return jnp.dtype(t)


def _type_of(dtype):
    return _TYPE_OF_JNP[jnp.dtype(dtype)]


class Shape:
    """Shape of an Op: element type (a `Type` string) and sizes, or a tuple of Shapes."""

    def __init__(self, dtype=None, sizes=(), tuple_shapes=None):
        self._dtype = dtype
        self._sizes = tuple(int(s) for s in sizes)
        self._tuple = tuple_shapes

    @classmethod
    def create(cls, dtype, sizes, dynamic_dimensions=None):
        return cls(dtype, sizes)

    def shape(self):
        return self

    def is_tuple(self):
        return self._tuple is not None

    def tuple_size(self):
        return len(self._tuple)

    def tuple_shape(self, index):
        return self._tuple[index]

    def is_dynamic(self):
        return False

    def as_scalar(self):
        return Shape(self._dtype, ())

    @property
    def rank(self):
        return len(self._sizes)

    @property
    def sizes(self):
        return self._sizes

    @property
    def dynamic_dimensions(self):
        return [False] * len(self._sizes)

    @property
    def dtype(self):
        return self._dtype

    def __repr__(self):
        if self._tuple is not None:
            return "(" + ", ".join(map(repr, self._tuple)) + ")"
        return f"{self._dtype}[{','.join(map(str, self._sizes))}]"


class Builder:
    """Names a computation under construction; Ops of one computation share it."""

    def __init__(self, name):
        self.name = name


def create_builder(name):
    return Builder(name)


def mkshape(dtype, sizes, dynamic_dimensions=None):
    return Shape(dtype, sizes)


def _v(x):
    return x.v if isinstance(x, Op) else x


def _unwrap(x):
    if isinstance(x, Op):
        return tuple(_unwrap(o) for o in x.v) if x.is_tuple() else x.v
    if isinstance(x, (tuple, list)):
        return tuple(_unwrap(o) for o in x)
    return x


def _wrap(tree, builder):
    if isinstance(tree, (tuple, list)):
        return Op(tuple(_wrap(t, builder) for t in tree), builder)
    return Op(tree, builder)


def _call_branch(fn, operands, builder):
    ops = [_wrap(o, builder) for o in operands]
    return _unwrap(fn(*ops))


class Op:
    """One value of a computation: a JAX array (traced) or a tuple of Ops."""

    __hash__ = object.__hash__

    def __init__(self, op, builder=None):
        self.v = op
        self._builder = builder

    # -- introspection --------------------------------------------------------
    def is_tuple(self):
        return isinstance(self.v, tuple)

    def shape(self):
        if self.is_tuple():
            return Shape(tuple_shapes=tuple(o.shape() for o in self.v))
        a = jnp.asarray(self.v) if not hasattr(self.v, "dtype") else self.v
        return Shape(_type_of(a.dtype), a.shape)

    def builder(self):
        return self._builder

    def build(self, name=None):
        return self

    def _new(self, value):
        return Op(value, self._builder)

    # -- arithmetic, logic, comparisons ----------------------------------------
    def __add__(self, rhs): return self._new(self.v + _v(rhs))
    def __sub__(self, rhs): return self._new(self.v - _v(rhs))
    def __mul__(self, rhs): return self._new(self.v * _v(rhs))
    def __matmul__(self, rhs): return self._new(jnp.matmul(self.v, _v(rhs)))

    def __truediv__(self, rhs):
        a, b = self.v, _v(rhs)
        if jnp.issubdtype(jnp.result_type(a), jnp.integer):
            return self._new(lax.div(a, jnp.asarray(b, a.dtype)))
        return self._new(a / b)

    def __pow__(self, rhs): return self._new(lax.pow(self.v, jnp.asarray(_v(rhs), self.v.dtype)))
    def __mod__(self, rhs): return self._new(lax.rem(self.v, jnp.asarray(_v(rhs), self.v.dtype)))
    def __neg__(self): return self._new(-self.v)
    def __not__(self): return self._new(jnp.logical_not(self.v) if self.v.dtype == jnp.bool_ else ~self.v)
    __invert__ = __not__
    def __and__(self, rhs): return self._new(self.v & _v(rhs))
    def __or__(self, rhs): return self._new(self.v | _v(rhs))
    def __xor__(self, rhs): return self._new(self.v ^ _v(rhs))
    def __eq__(self, rhs): return self._new(self.v == _v(rhs))
    def __ne__(self, rhs): return self._new(self.v != _v(rhs))
    def __le__(self, rhs): return self._new(self.v <= _v(rhs))
    def __lt__(self, rhs): return self._new(self.v < _v(rhs))
    def __ge__(self, rhs): return self._new(self.v >= _v(rhs))
    def __gt__(self, rhs): return self._new(self.v > _v(rhs))
    def __lshift__(self, rhs): return self._new(lax.shift_left(self.v, jnp.asarray(_v(rhs), self.v.dtype)))
    def __rshift__(self, rhs): return self._new(lax.shift_right_logical(self.v, jnp.asarray(_v(rhs), self.v.dtype)))

    # -- shapes ----------------------------------------------------------------
    def reshape(self, sizes, dimensions=None, inferred_dimension=None):
        v = self.v if dimensions is None else jnp.transpose(self.v, dimensions)
        return self._new(jnp.reshape(v, tuple(sizes)))

    def dynamic_reshape(self, sizes):
        return self.reshape(sizes)

    def broadcast(self, sizes):
        return self._new(lax.broadcast(self.v, tuple(sizes)))

    def broadcast_in_dim(self, sizes, dimensions):
        return self._new(lax.broadcast_in_dim(self.v, tuple(sizes), tuple(dimensions)))

    def slice(self, start_indices, limit_indices, strides=None):
        return self._new(lax.slice(self.v, tuple(start_indices), tuple(limit_indices),
                                   None if strides is None else tuple(strides)))

    def slice_in_dim(self, start_index, limit_index, dimno, stride=1):
        return self._new(lax.slice_in_dim(self.v, start_index, limit_index, stride, dimno))

    def dynamic_slice(self, start_indices, slice_sizes):
        return self._new(lax.dynamic_slice(self.v, [_v(i) for i in start_indices], tuple(slice_sizes)))

    def dynamic_update_slice(self, update, start_indices):
        return self._new(lax.dynamic_update_slice(self.v, _v(update), [_v(i) for i in start_indices]))

    def transpose(self, permutation):
        return self._new(jnp.transpose(self.v, tuple(permutation)))

    def rev(self, dimensions):
        return self._new(lax.rev(self.v, tuple(dimensions)))

    def pad(self, value, config):
        """config: one (low, high, interior) per dimension."""
        return self._new(lax.pad(self.v, jnp.asarray(_v(value), self.v.dtype),
                                 [tuple(c) for c in config]))

    def get_dimension_size(self, dimension):
        return self._new(jnp.asarray(self.v.shape[dimension], jnp.int32))

    def set_dimension_size(self, size, dimension):
        return self

    # -- types -----------------------------------------------------------------
    def cast(self, to_type):
        return self._new(self.v.astype(_jnp_dtype(to_type)))

    def bitcast(self, to_type):
        return self._new(lax.bitcast_convert_type(self.v, _jnp_dtype(to_type)))

    # -- reductions, selection, linear algebra -----------------------------------
    def reduce(self, init_value, computation, dimensions, keep_dims=False):
        """computation: a function of two Ops (or 'add' / 'mul' / 'max' / 'min')."""
        fn = {"add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min}.get(computation)
        if fn is None:
            b = self._builder
            fn = lambda x, y: _v(computation(Op(x, b), Op(y, b)))  # noqa: E731
        out = lax.reduce(self.v, jnp.asarray(_v(init_value), self.v.dtype), fn, tuple(dimensions))
        if keep_dims:
            out = jnp.expand_dims(out, tuple(dimensions))
        return self._new(out)

    def reduce_all(self, init_value, computation, keep_dims=False):
        return self.reduce(init_value, computation, range(self.v.ndim), keep_dims)

    def reduce_window(self, init_value, computation, window_dimensions, window_strides=None,
                      padding="VALID"):
        fn = {"add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min}[computation]
        strides = tuple(window_strides or (1,) * self.v.ndim)
        return self._new(lax.reduce_window(self.v, jnp.asarray(_v(init_value), self.v.dtype), fn,
                                           tuple(window_dimensions), strides, padding))

    def max_pool(self, kernel_size, stride, padding="VALID"):
        return self.reduce_window(-jnp.inf, "max", kernel_size, stride, padding)

    def select(self, true_value, false_value):
        return self._new(lax.select(self.v, _v(true_value), _v(false_value)))

    def clamp(self, min_value, max_value):
        return self._new(lax.clamp(jnp.asarray(_v(min_value), self.v.dtype), self.v,
                                   jnp.asarray(_v(max_value), self.v.dtype)))

    def triangualr_solve(self, b, left_side, lower, unit_diagonal, transpose_a):
        """Solve A x = b (left_side) or x A = b with A = self triangular.
        (Named as upstream spells it.)"""
        return self._new(lax.linalg.triangular_solve(
            self.v, _v(b), left_side=left_side, lower=lower,
            transpose_a=transpose_a, unit_diagonal=unit_diagonal))

    triangular_solve = triangualr_solve

    def conv(self, kernel, window_strides, feature_group_count=1, batch_group_count=1,
             padding="VALID"):
        return self._new(lax.conv_general_dilated(
            self.v, _v(kernel), tuple(window_strides), padding,
            feature_group_count=feature_group_count, batch_group_count=batch_group_count))

    def conv_general_dilated(self, kernel, window_strides, padding, lhs_dilation=None,
                             rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                             batch_group_count=1):
        return self._new(lax.conv_general_dilated(
            self.v, _v(kernel), tuple(window_strides), padding, lhs_dilation, rhs_dilation,
            dimension_numbers, feature_group_count, batch_group_count))

    # -- tuples and control flow -------------------------------------------------
    def get_tuple_element(self, index):
        return self.v[index]

    def conditional(self, true_operands, true_fn, false_operands, false_fn):
        b = self._builder
        t_ops = _unwrap(true_operands)
        f_ops = _unwrap(false_operands)
        out = lax.cond(self.v,
                       lambda ops: _call_branch(true_fn, ops[0], b),
                       lambda ops: _call_branch(false_fn, ops[1], b),
                       (t_ops, f_ops))
        return _wrap(out, b)

    def mkconditional(self, operands, true_fn, false_fn):
        """Run `true_fn(*operands)` when this predicate holds, else `false_fn(*operands)`."""
        return self.conditional(operands, true_fn, operands, false_fn)

    @classmethod
    def mkwhile(cls, operands, condition_fn, body_fn):
        """While `condition_fn(*values)` holds, `values = body_fn(*values)` (a tuple Op)."""
        ops = list(operands.v) if isinstance(operands, Op) else list(operands)
        b = next((o._builder for o in ops if isinstance(o, Op)), None)
        init = tuple(_unwrap(o) for o in ops)
        out = lax.while_loop(
            lambda vals: _call_branch(condition_fn, vals, b),
            lambda vals: tuple(_call_branch(body_fn, vals, b)),
            init)
        return _wrap(out, b)

    def while_loop(self, condition_fn, body_fn):
        return Op.mkwhile(self, condition_fn, body_fn)

    # -- element-wise math ---------------------------------------------------------
    def acos(self): return self._new(jnp.arccos(self.v))
    def asin(self): return self._new(jnp.arcsin(self.v))
    def atan(self): return self._new(jnp.arctan(self.v))
    def ceil(self): return self._new(jnp.ceil(self.v))
    def cos(self): return self._new(jnp.cos(self.v))
    def cosh(self): return self._new(jnp.cosh(self.v))
    def erf(self): return self._new(lax.erf(self.v))
    def erfc(self): return self._new(lax.erfc(self.v))
    def erfinf(self): return self._new(lax.erf_inv(self.v))
    def exp(self): return self._new(jnp.exp(self.v))
    def expm1(self): return self._new(jnp.expm1(self.v))
    def floor(self): return self._new(jnp.floor(self.v))
    def log(self): return self._new(jnp.log(self.v))
    def log1p(self): return self._new(jnp.log1p(self.v))
    def sqrt(self): return self._new(jnp.sqrt(self.v))
    def real(self): return self._new(jnp.real(self.v))
    def imag(self): return self._new(jnp.imag(self.v))
    def clz(self): return self._new(lax.clz(self.v))
    def conj(self): return self._new(jnp.conj(self.v))
    def rsqrt(self): return self._new(lax.rsqrt(self.v))
    def sin(self): return self._new(jnp.sin(self.v))
    def sinh(self): return self._new(jnp.sinh(self.v))
    def tan(self): return self._new(jnp.tan(self.v))
    def tanh(self): return self._new(jnp.tanh(self.v))
    def atan2(self, other): return self._new(jnp.arctan2(self.v, _v(other)))
    def max(self, other): return self._new(jnp.maximum(self.v, _v(other)))
    def min(self, other): return self._new(jnp.minimum(self.v, _v(other)))

    def scalar_like(self, value):
        return self._new(jnp.asarray(value, self.v.dtype))

    def zeros_like(self):
        return self._new(jnp.zeros_like(self.v))

    def ones_like(self):
        return self._new(jnp.ones_like(self.v))

    # -- constructors ----------------------------------------------------------------
    @classmethod
    def tuple(cls, ops, builder=None):
        ops = tuple(ops)
        if builder is None:
            builder = next((o._builder for o in ops if isinstance(o, Op)), None)
        return Op(ops, builder)

    @classmethod
    def concat_in_dim(cls, ops, dimension, builder=None):
        ops = list(ops)
        return Op(jnp.concatenate([_v(o) for o in ops], axis=dimension),
                  builder or ops[0]._builder)

    @classmethod
    def call(cls, computation, operands, builder=None):
        ops = list(operands)
        return _wrap(_unwrap(computation(*ops)), builder or ops[0]._builder)

    @classmethod
    def constant(cls, builder, value):
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        return Op(jnp.asarray(np.asarray(value)), builder)

    @classmethod
    def scalar(cls, builder, value, dtype=None):
        return Op(jnp.asarray(value, _jnp_dtype(dtype or Type.F32)), builder)

    @classmethod
    def zero(cls, builder, dtype=None):
        return cls.scalar(builder, 0, dtype)

    @classmethod
    def one(cls, builder, dtype=None):
        return cls.scalar(builder, 1, dtype)

    @classmethod
    def iota(cls, builder, shape, iota_dimension):
        return Op(lax.broadcasted_iota(_jnp_dtype(shape.dtype), shape.sizes, iota_dimension), builder)

    @classmethod
    def sort(cls, ops, comparator=None, dimension=-1, is_stable=False):
        ops = list(ops)
        if comparator is not None:
            raise NotImplementedError("xla_builder.Op.sort: custom comparators are not supported")
        out = lax.sort(tuple(_v(o) for o in ops), dimension=dimension, is_stable=is_stable,
                       num_keys=1)
        return Op.tuple([Op(o, ops[0]._builder) for o in out])

    @classmethod
    def map(cls, ops, computation, dimensions, static_operands=(), builder=None):
        ops = list(ops)
        b = builder or ops[0]._builder
        fn = lambda *xs: _v(computation(*[Op(x, b) for x in xs]))  # noqa: E731
        for _ in range(ops[0].v.ndim):
            fn = jax.vmap(fn)
        return Op(fn(*[o.v for o in ops]), b)

    @classmethod
    def to_torch_type(cls, dtype):
        return _XLA_PT_TYPE_MAP[dtype] if dtype else torch.float32

    @classmethod
    def from_torch_type(cls, dtype):
        return _PT_XLA_TYPE_MAP[dtype]


def tensor_shape(tensor, device=""):
    """Shape (or list of Shapes) of a tensor (or list of tensors)."""
    if isinstance(tensor, (list, tuple)):
        return [tensor_shape(t) for t in tensor]
    return Shape(_PT_XLA_TYPE_MAP[tensor.dtype], tensor.shape)


# -- running JAX functions on XLA tensors ------------------------------------------------

# (function, argument tree structure, non-tensor arguments) -> jax.jit of it
_JAX_TO_XLA_COMPUTATION_CACHE = {}


def _jax_to_xla_computation_cache_elements():
    """How many XLA computations call_jax has compiled (all cached functions)."""
    n = 0
    for jitted in _JAX_TO_XLA_COMPUTATION_CACHE.values():
        size = getattr(jitted, "_cache_size", None)
        n += size() if size is not None else 1
    return n


def _array_fn(fn, leaves, tree, pos):
    """fn called on the argument tree flattened as `leaves` (`tree`), with the
    arrays it is given put at leaf positions `pos` (the tensors' places)."""
    def flat(*arrays):
        full = list(leaves)
        for p, a in zip(pos, arrays):
            full[p] = a
        a, k = jax.tree_util.tree_unflatten(tree, full)
        return fn(*a, **k)
    return flat


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


def call_jax(jax_func, args, kwargs=None, name=None, override_hash=None):
    """Run `jax_func(*args, **kwargs)` inside the traced graph (one node, no host
    round trip), differentiable through `jax.vjp`; torch tensors in the argument
    tree are its array inputs, other arguments are static. See
    torch_xla.experimental.jax_interop.call_jax."""
    from torch_xla.experimental.jax_interop import call_jax as _in_graph
    return _in_graph(jax_func, args, kwargs, name=name, override_hash=override_hash)


def _call_jax_eagerly(jax_func, args, kwargs=None, name=None, override_hash=None):
    """Run `jax_func(*args, **kwargs)` with every torch tensor in the argument
    tree replaced by its JAX array; JAX arrays in the result come back as XLA
    tensors. Other arguments are static (part of the compilation key).

    Eager: runs now, on the tensors' current values (see the module doc)."""
    from torch_xla import _XLAC
    import torch_xla
    kwargs = {} if kwargs is None else dict(kwargs)
    leaves, treedef = jax.tree_util.tree_flatten((tuple(args), kwargs))
    tensor_pos = [i for i, x in enumerate(leaves) if _is_tensor(x)]
    static = tuple((i, x) for i, x in enumerate(leaves) if not _is_tensor(x))
    try:
        key = (override_hash or jax_func, treedef, static)
        hash(key)
    except TypeError:
        key = None
    jitted = _JAX_TO_XLA_COMPUTATION_CACHE.get(key) if key is not None else None
    if jitted is None:
        flat_fn = _array_fn(jax_func, leaves, treedef, tensor_pos)
        flat_fn.__name__ = name or getattr(jax_func, "__name__", "call_jax")
        jitted = jax.jit(flat_fn)
        if key is not None:
            _JAX_TO_XLA_COMPUTATION_CACHE[key] = jitted
    dev = torch_xla.device()
    tensors = [leaves[p] for p in tensor_pos]
    tensors = [t if t.device.type == "xla" else t.to(dev) for t in tensors]
    torch_xla.sync()
    arrays = [_XLAC._xla_tensor_to_jax(t.detach()) for t in tensors]
    out = jitted(*arrays)
    return jax.tree_util.tree_map(
        lambda a: _XLAC._xla_tensor_from_jax(a) if isinstance(a, jax.Array) else a, out)


class Computation:
    """A named computation made by `create_computation`: `fn` of `Op` values, with the
    parameter shapes it was created for."""

    def __init__(self, name, fn, shapes, key=None):
        self.name = name
        self.fn = fn
        self.shapes = list(shapes)
        self._key = key if key is not None else fn

    def jax_function(self):
        """The computation as a JAX function. Equal computations (same name,
        function and parameter shapes) give the same function object, so a
        graph calling one compiles once however often it is re-created."""
        try:
            key = (self.name, self._key, tuple((tuple(s.sizes), str(s.dtype)) for s in self.shapes))
            hash(key)
        except (TypeError, AttributeError):
            key = None
        run = _COMPUTATION_FNS.get(key) if key is not None else None
        if run is None:
            name, fn = self.name, self.fn

            def run(*arrays):
                builder = create_builder(name)
                return _unwrap(fn(*[Op(a, builder) for a in arrays]))
            run.__name__ = name
            if key is not None:
                if len(_COMPUTATION_FNS) > 1024:
                    _COMPUTATION_FNS.clear()
                _COMPUTATION_FNS[key] = run
        return run


_COMPUTATION_FNS = {}


def create_computation(name, fn, shapes, **kwargs):
    """A Computation of `fn` (a function of Ops) for parameters of `shapes`."""
    key = fn
    if kwargs:
        fn0 = fn
        fn = lambda *ops: fn0(*ops, **kwargs)  # noqa: E731
        try:
            key = (fn0, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:
            key = fn
    return Computation(name, fn, shapes, key)


class ModuleComputation(Computation):
    """A computation given as a serialized HloModuleProto (`computation_from_module_proto`,
    e.g. from `torch_xla._XLAC.lowering.LoweringContext.hlo()`): printable, with
    its parameter shapes; it is not run here (a graph is traced from tensors)."""

    def __init__(self, name, proto):
        from torch_xla.engine import api
        params, result = api.hlo_module_program_shape(proto)
        super().__init__(name, None, [_shape_of(p) for p in params], key=("module", bytes(proto)))
        self.proto = bytes(proto)
        self.result_shape = _shape_of(result)

    def jax_function(self):
        raise NotImplementedError(
            f"computation {self.name!r} was made from an HloModuleProto: it can be printed "
            "(get_computation_hlo) but not run on XLA tensors here; build it with "
            "create_computation or call a JAX function with call_jax")


def _shape_of(s):
    if isinstance(s, list):
        return Shape(tuple_shapes=tuple(_shape_of(x) for x in s))
    return Shape(s[0], s[1])


def computation_from_module_proto(name, proto):
    """The computation a serialized HloModuleProto (bytes) describes."""
    if not isinstance(proto, (bytes, bytearray, memoryview)):
        raise TypeError(f"computation_from_module_proto({name!r}): expected the serialized "
                        f"HloModuleProto as bytes, got {type(proto).__name__}")
    return ModuleComputation(name, proto)


def get_computation_hlo(computation):
    """Text of a Computation: HLO text for one made from an HloModuleProto, as
    upstream prints it; StableHLO text (JAX lowering at its parameter shapes)
    for one made by create_computation."""
    if isinstance(computation, ModuleComputation):
        from torch_xla.engine import api
        return api.hlo_module_text(computation.proto)
    args = [jax.ShapeDtypeStruct(s.sizes, _jnp_dtype(s.dtype)) for s in computation.shapes]
    return jax.jit(computation.jax_function()).lower(*args).as_text()


def create_placeholder_tensor(shape, dtype):
    """An XLA tensor of `shape` and `dtype` that holds no data: graphs can be traced
    over it (it becomes a parameter, and nothing is transferred to the device),
    but computing with it or reading it raises RuntimeError."""
    from torch_xla.engine import api
    return api.placeholder_tensor(tuple(shape), dtype)


class FlattenedInputFunc:
    """A function of nested arguments called through flat lists.

    `preprocess(args, kwargs=None)` flattens the arguments (any pytree) and
    returns their tensors; `flat_call(tensors)` puts them back into the
    structure, with the other arguments of the last `preprocess` call, calls
    the function and returns its output flattened; `postprocess(flat)` rebuilds
    the output's structure. So that
    `postprocess(flat_call(preprocess(args, kwargs))) == fn(*args, **kwargs)`."""

    def __init__(self, orig_func):
        self.orig_func = orig_func
        self._in = None    # (treedef, leaves with None where tensors go)
        self._out = None   # the output's treedef

    def preprocess(self, args, kwargs=None):
        from torch.utils._pytree import tree_flatten
        leaves, spec = tree_flatten((tuple(args), dict(kwargs or {})))
        self._in = (spec, [None if isinstance(x, torch.Tensor) else x for x in leaves])
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    def flat_call(self, flat_inputs):
        from torch.utils._pytree import tree_flatten, tree_unflatten
        if self._in is None:
            raise RuntimeError("FlattenedInputFunc: call preprocess() before flat_call()")
        spec, statics = self._in
        it = iter(flat_inputs)
        leaves = [next(it) if s is None else s for s in statics]
        args, kwargs = tree_unflatten(leaves, spec)
        out_leaves, self._out = tree_flatten(self.orig_func(*args, **kwargs))
        return out_leaves

    def postprocess(self, flat_outputs):
        from torch.utils._pytree import tree_unflatten
        return tree_unflatten(list(flat_outputs), self._out)


class XlaCallable:
    """Calls a function written with the `Op` builder API on XLA tensors: the
    first call with given input shapes and dtypes builds its computation, later
    ones reuse it; each call is one node of the lazy graph."""

    def __init__(self, xla_func):
        self._flat = FlattenedInputFunc(xla_func)
        self._cache = {}   # input signature -> (Computation, output treedef)

    def __call__(self, *args, **kwargs):
        from torch_xla import _XLAC
        flat = self._flat.preprocess(args, kwargs)
        key = (self._flat._in[0], tuple(repr(s) for s in self._flat._in[1]),
               tuple((tuple(t.shape), t.dtype) for t in flat))
        entry = self._cache.get(key)
        if entry is None:
            holder = {}

            def build(*ops):
                outs = self._flat.flat_call(list(ops))
                holder["out"] = self._flat._out
                return Op.tuple(outs)
            comp = create_computation("xla::computation", build, [tensor_shape(t) for t in flat])
            entry = self._cache[key] = [comp, holder]
        comp, holder = entry
        outs = _XLAC._xla_user_computation("xla::computation", flat, comp)
        from torch.utils._pytree import tree_unflatten
        return tree_unflatten(list(outs), holder["out"])
