"""From one aten call to one IR node.

The hot path: walk the arguments once, building a key from the tensor avals,
static arguments and scalar types; look the key up in the op's memo; on a hit,
make a node and wrap its outputs. On a miss (the first time an op sees these
shapes), work out output shapes with PyTorch's meta kernels, build the
argument template the lowering will be called with, and check the lowering
abstractly with jax.eval_shape so that errors surface at the user's line.
"""
import math

import jax
import numpy as np
import torch

from ..base import config
from ..base.dtypes import to_jax
from ..base.frames import where
from ..compile import persistent
from ..ir import node as ir
from ..ir.node import _scalar_cache
from ..ops import checks, registry
from ..ops.context import LoweringContext, ctx, lowering  # noqa: F401  (rules and handlers read ctx)
from ..ops.op import OpEntry, OpInfo, Slot, apply_entry  # noqa: F401
from ..runtime import platform, topology
from .state import Base
from .tensor import XLATensor, new_base

# read once (the walk below tests it per argument); config.override refreshes it. The memo keys
# differ between the two settings (a special scalar is part of the key), so entries stay valid.
NO_SPECIAL_SCALARS = config.read("XLA_NO_SPECIAL_SCALARS")


def _refresh_no_special_scalars():
    global NO_SPECIAL_SCALARS
    NO_SPECIAL_SCALARS = config.read("XLA_NO_SPECIAL_SCALARS")


config.on_override("XLA_NO_SPECIAL_SCALARS", _refresh_no_special_scalars)
_SCALAR_TYPES = (float, int, bool, complex)
_SKEY = {float: ("s", float), int: ("s", int), bool: ("s", bool), complex: ("s", complex)}
_SKEY_F = _SKEY[float]
_SKEY_F32 = ("s", float, "float32")
# a Python float next to a tensor of these dtypes is fed as float32, the precision
# eager computes it in (and upstream casts it to): no f64 in the graph, which
# TPUs do not run natively; beside an f64 (or no float) tensor it stays float64
_NARROW = frozenset((torch.float32, torch.bfloat16, torch.float16, torch.complex64))


class ValueArg:
    """An operand that is a bare IR value with its aval (no tensor holds it)."""
    __slots__ = ("value", "aval")

    def __init__(self, v, aval):
        self.value = v
        self.aval = aval


# ---------------------------------------------------------------------------
# argument walk


class DeviceMismatch(Exception):
    pass


def tracing_note(name, args, kwargs):
    """The user's line under an op's error: '[torch_xla] while tracing aten::op(args) at file:line'."""
    return f"[torch_xla] while tracing aten::{name}{describe_args(args, kwargs)} at {where()}"


def with_note(err, note):
    """err with `note` shown under its message (a note on Python >= 3.11, so
    str(err) stays the message; appended to it before)."""
    if hasattr(err, "add_note"):
        err.add_note(note)
        return err
    return type(err)(f"{err}\n  {note}")


class DimensionError(IndexError, RuntimeError):
    """An argument out of range for a tensor's dimensions: eager PyTorch raises
    IndexError, upstream torch_xla RuntimeError; this is both."""


def dimension_error(e):
    """eager's IndexError as a DimensionError (both), other exceptions as they are."""
    return DimensionError(str(e)) if type(e) is IndexError else e


def _walk(a, key, ops, hs, scalar, fdt=None):
    t = type(a)
    if t is XLATensor:
        s = a._lazy
        key.append(s.aval)
        v = s.value if type(s) is Base else s.current()
        ops.append(v)
        hs.append(v[0].hash + v[1])
    elif t is ValueArg:
        key.append(a.aval)
        v = a.value
        ops.append(v)
        hs.append(v[0].hash + v[1])
    elif t in _SCALAR_TYPES or (scalar and isinstance(a, _SCALAR_TYPES)):
        if scalar and (NO_SPECIAL_SCALARS or (a != 0 and a != 1) or t is complex):
            if t not in _SKEY:
                a = (bool(a) if isinstance(a, bool) else int(a) if isinstance(a, int)
                     else float(a) if isinstance(a, float) else complex(a))
            if type(a) is float and fdt in _NARROW:
                v = ir.scalar_value(a, "float32")
                key.append(_SKEY_F32)
            else:
                v = ir.scalar_value(a)
                key.append(_SKEY[type(a)])
            ops.append(v)
            hs.append(v[0].hash)
        else:
            # -0.0 == 0.0 with one hash: the key keeps the sign (1 / -0.0 is -inf)
            key.append((t, a) if a or t is not float else (t, a, math.copysign(1.0, a)))
    elif t is list or t is tuple:
        key.append(t)
        key.append(len(a))
        for x in a:
            _walk(x, key, ops, hs, scalar, fdt)
    elif isinstance(a, torch.Tensor):
        if isinstance(a, XLATensor):
            s = a._lazy
            key.append(s.aval)
            v = s.value if type(s) is Base else s.current()
            ops.append(v)
            hs.append(v[0].hash + v[1])
        elif a.device.type == "meta":
            raise RuntimeError("torch_xla: meta tensors cannot be mixed with XLA tensors")
        elif a.dim() == 0:
            # a CPU 0-dim tensor joins like a scalar of its dtype
            v = _cpu_scalar(a)
            key.append(("c0", a.dtype))
            ops.append(v)
            hs.append(v[0].hash)
        else:
            raise DeviceMismatch(a)
    else:
        try:
            hash(a)
        except TypeError:
            a = repr(a)
        key.append(a)


def _cpu_scalar(a):
    return ir.scalar_value(a.item(), to_jax(a.dtype).name)


class _IntsMark:
    """Marks a list of ints in an op key (walk_args' fast path); its repr is
    stable across processes, as the persistent cache's digests need."""
    __slots__ = ()

    def __repr__(self):
        return "<ints>"


_INTS = _IntsMark()


def _all_ints(a):
    for x in a:
        if type(x) is not int:
            return False
    return True


def walk_args(args, kwargs, info, into=None):
    """-> (key tuple, operand values list, operand hash list). With `into`, a
    (key, operands, hashes) triple of lists, appends to those and returns None
    (trace_fused walks a `_foreach_` call's elements into one key)."""
    if into is None:
        key = []
        ops = []
        hs = []
    else:
        key, ops, hs = into
    sp = info.scalar_pos
    fdt = None   # the dtype of the last tensor operand: how a float scalar is fed
    for i, a in enumerate(args):
        t = type(a)
        if t is XLATensor:
            s = a._lazy
            aval = s.aval
            key.append(aval)
            v = s.value if type(s) is Base else s.current()
            ops.append(v)
            hs.append(v[0].hash + v[1])
            fdt = aval[1]
        elif t is float and i in sp and not NO_SPECIAL_SCALARS and a != 0 and a != 1:
            # the hot case: a Python float operand (lr, eps, a constant factor)
            if fdt in _NARROW:
                v = _scalar_cache.get(("float32", float, a))
                if v is None:
                    v = ir.scalar_value(a, "float32")
                key.append(_SKEY_F32)
            else:
                v = _scalar_cache.get(("float64", float, a))
                if v is None:
                    v = ir.scalar_value(a)
                key.append(_SKEY_F)
            ops.append(v)
            hs.append(v[0].hash)
        elif (t is list or t is tuple) and i not in sp and _all_ints(a):
            # the other hot case: a size or dims list (view, reshape, permute, sum)
            key.append(_INTS)
            key.append(t)
            key.append(tuple(a))
        else:
            _walk(a, key, ops, hs, i in sp, fdt)
    if kwargs:
        sk = info.scalar_kw
        for k, a in kwargs.items():
            key.append(k)
            _walk(a, key, ops, hs, k in sk, fdt)
    if into is None:
        return tuple(key), ops, hs


_infos = {}


def op_info(func):
    """The OpInfo of aten overload `func` (its lowering for this platform, its
    meta kernel, which arguments are scalar operands), made once."""
    info = _infos.get(func)
    if info is None:
        name = func._schema.name.split("::")[-1]
        if func._overloadname != "default":
            name += "." + func._overloadname
        info = _infos[func] = OpInfo(name, func, registry.find(func, platform.jax_platform()),
                                     meta=registry.META.get(func) or registry.META.get(func.overloadpacket))
        st = registry.static_args(func)
        if st:
            args = func._schema.arguments
            info.scalar_pos = frozenset(i for i in info.scalar_pos if args[i].name not in st)
            info.scalar_kw = info.scalar_kw - st
    return info


# ---------------------------------------------------------------------------
# templates and meta shapes

def _template(a, counter, scalar):
    t = type(a)
    if isinstance(a, torch.Tensor) or t is ValueArg:
        if isinstance(a, torch.Tensor) and not isinstance(a, XLATensor) and a.device.type != "xla" and a.dim() != 0:
            raise DeviceMismatch(a)
        s = Slot(counter[0])
        counter[0] += 1
        return s
    if isinstance(a, _SCALAR_TYPES) and scalar and (NO_SPECIAL_SCALARS or (a != 0 and a != 1) or isinstance(a, complex)):
        s = Slot(counter[0])
        counter[0] += 1
        return s
    if t is list or t is tuple:
        return t(_template(x, counter, scalar) for x in a)
    return a


def aval_of(a):
    """(shape, dtype) of an XLA tensor or a ValueArg."""
    return a.aval if type(a) is ValueArg else a._lazy.aval


def meta_arg(a):
    """An argument as PyTorch's meta kernels take it: XLA tensors (and bare
    values) become meta tensors of their avals."""
    if isinstance(a, torch.Tensor) or type(a) is ValueArg:
        if isinstance(a, torch.Tensor) and not isinstance(a, XLATensor):
            return a  # CPU 0-dim
        shape, dtype = aval_of(a)
        return torch.empty(shape, dtype=dtype, device="meta")
    if type(a) in (list, tuple):
        return type(a)(meta_arg(x) for x in a)
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("meta")
    return a


def _flatten_out(out):
    """meta result -> (avals list, struct). struct: None (one tensor), or a tuple
    describing a tuple/list with None holes."""
    if isinstance(out, torch.Tensor):
        return [(tuple(out.shape), out.dtype)], None
    if isinstance(out, (tuple, list)):
        avals = []
        struct = []
        for o in out:
            if o is None:
                struct.append(None)
            elif isinstance(o, torch.Tensor):
                struct.append(len(avals))
                avals.append((tuple(o.shape), o.dtype))
            elif isinstance(o, (list, tuple)):
                sub = []
                for oo in o:
                    sub.append(len(avals))
                    avals.append((tuple(oo.shape), oo.dtype))
                struct.append(tuple(sub))
            else:
                raise NotImplementedError(f"op returns {type(o).__name__}")
        return avals, (type(out), tuple(struct))
    raise NotImplementedError(f"op returns {type(out).__name__}")


def describe_args(args, kwargs):
    def d(a):
        if isinstance(a, torch.Tensor) or type(a) is ValueArg:
            ours = type(a) is ValueArg or isinstance(a, XLATensor)
            shape, dtype = aval_of(a) if ours else (tuple(a.shape), a.dtype)
            dev = "" if ours else f"@{a.device}"
            return f"{str(dtype).replace('torch.', '')}{list(shape)}{dev}"
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(d(x) for x in a) + "]"
        return repr(a)
    parts = [d(a) for a in args] + [f"{k}={d(v)}" for k, v in (kwargs or {}).items()]
    return "(" + ", ".join(parts) + ")"


class LoweringError(RuntimeError):
    pass


def op_error(info, args, kwargs, exc, what="lowering failed"):
    return LoweringError(
        f"torch_xla: {what} for aten::{info.name}{describe_args(args, kwargs)}\n"
        f"  at {where()}\n  cause: {type(exc).__name__}: {exc}")


def make_entry(info, key, args, kwargs):
    counter = [0]
    sp, sk = info.scalar_pos, info.scalar_kw
    try:
        tmpl = tuple(_template(a, counter, i in sp) for i, a in enumerate(args))
        kwt = {k: _template(v, counter, k in sk) for k, v in (kwargs or {}).items()}
    except DeviceMismatch as e:
        raise device_mismatch_error(info.name, e.args[0]) from None
    margs = tuple(meta_arg(a) for a in args)
    mkw = {k: meta_arg(v) for k, v in (kwargs or {}).items()}
    try:
        if info.meta is not None:
            out = info.meta(*margs, **mkw)
        else:
            out = info.func(*margs, **mkw)
    except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as e:
        msg = str(e)
        note = tracing_note(info.name, args, kwargs)
        if info.func is not None and not getattr(info.meta, "probes", False):
            # what eager refuses from dtypes (checks.FAITHFUL), in eager's words rather than
            # the meta kernel's ("negative_slope argument of type float cannot be safely cast")
            refused = checks.refused_call(info.func, margs, mkw)
            if refused is None and type(e) in (ValueError, TypeError, AssertionError):
                # a Python meta kernel's ValueError/TypeError/assert: eager's kernel refuses the
                # call with its own type and words (add(long, long, alpha=0.5): RuntimeError;
                # torch 2.11's meta gather asserts on a dim eager calls an IndexError)
                refused = checks.eager_error(info.func, margs, mkw, real=True)
        else:
            refused = None
        upstream = checks.diagnose(info.func.overloadpacket.__name__, args, kwargs) if info.func is not None else None
        if refused is not None:   # eager's type; upstream's words where it has its own
            raise with_note(dimension_error(checks.fresh(refused, upstream)), note) from None
        if upstream is not None:   # upstream's words; the user's line as a note
            raise with_note(RuntimeError(upstream), note) from None
        # a bad dimension is an IndexError in eager and a RuntimeError upstream: both
        cls = DimensionError if type(e) is IndexError else type(e)
        raise cls(f"{msg}\n  {note}") from None
    if info.func is not None and not getattr(info.meta, "probes", False):
        # the dtypes eager's CPU kernel refuses (bitwise ops of floats, softmax of integers)
        refused = checks.refusal(info.func, margs, mkw, out)
        if refused is not None:
            raise with_note(dimension_error(refused), tracing_note(info.name, args, kwargs)) from None
    avals, struct = _flatten_out(out)
    _check_size(info, avals, args, kwargs)
    e = OpEntry()
    e.info = info
    e.name = info.name
    e.static_key = key
    # repr: ints hash modulo 2**61-1, so hash(2**63-1) == hash(3) and a[1:] would
    # share a graph key with a[1:3]
    key_repr = repr(key)
    e.hash = hash((info.name, key_repr))
    e.out_avals = avals
    e.out_struct = struct
    e.template = tmpl
    e.kwtemplate = kwt
    e.cast = None
    e.common_dtype = None
    in_avals = []
    for a in list(args) + list((kwargs or {}).values()):
        _collect_avals(a, in_avals)
    e.in_avals = in_avals
    if len(margs) >= 2 and _promotable(margs[0]) and _promotable(margs[1]):
        try:
            e.common_dtype = torch.result_type(margs[0], margs[1])
        except Exception:  # noqa: BLE001
            pass
    if not config.read("XLA_SKIP_LOWERING_CHECK"):
        known, cast = persistent.checked(info.name, key_repr)
        if known:
            e.cast = cast
        else:
            _check_entry(e, args, kwargs)
            persistent.record_check(info.name, key_repr, e.cast)
    return e


def _check_size(info, avals, args, kwargs):
    # an output no device of this process can hold would otherwise be traced,
    # compiled and then computed for hours (XLA fuses rand(2**50).sum() into a
    # loop that never allocates it); views allocate nothing
    nbytes = 0
    for shape, dt in avals:
        n = dt.itemsize if isinstance(dt, torch.dtype) else 8
        for d in shape:
            n *= d
        nbytes += n
    if nbytes < (1 << 33):
        return
    if info.func is not None and any(r.alias_info is not None for r in info.func._schema.returns):
        return
    limit = platform.device_memory_bytes()
    if topology.mode() == topology.SPMD:   # a value may be sharded over every device
        limit *= topology.spmd_device_count()
    if nbytes > limit:
        shapes = ", ".join(f"{_short_dtype(dt)}{list(shape)}" for shape, dt in avals)
        raise with_note(RuntimeError(f"Error preparing computation: Out of memory allocating {nbytes} bytes."),
                        f"[torch_xla] aten::{info.name} would produce {shapes}, more than the "
                        f"{limit} bytes the device(s) hold, at {where()}")


def _short_dtype(dt):
    return str(dt).replace("torch.", "")


def _promotable(a):
    return isinstance(a, (torch.Tensor, int, float, bool, complex))


def _collect_avals(a, out):
    if type(a) is ValueArg or isinstance(a, XLATensor):
        out.append(aval_of(a))
    elif isinstance(a, (list, tuple)):
        for x in a:
            _collect_avals(x, out)


def device_mismatch_error(name, cpu_tensor):
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"xla:0 and {cpu_tensor.device}! (aten::{name} got a {cpu_tensor.device} tensor of shape "
        f"{list(cpu_tensor.shape)} at {where()}; move it with .to('xla') or move the XLA tensor with .cpu())")


# ---------------------------------------------------------------------------
# applying an entry to JAX arrays (graph replay and the abstract check)

_CONTEXTS = {}


def compile_context():
    """The LoweringContext of the platform graphs compile for now (one per platform):
    what a rule evaluated at trace time runs under, so that it sees the outputs its
    lowering will give (a rule or call_jax function may pick a platform's kernel)."""
    p = platform.jax_platform()
    c = _CONTEXTS.get(p)
    if c is None:
        c = _CONTEXTS[p] = LoweringContext(p)
    return c


def _check_entry(e, args, kwargs):
    """Run the lowering abstractly; record dtype fix-ups; raise with the user's line."""
    specs = []

    def spec_of(a):
        if type(a) is ValueArg or isinstance(a, XLATensor):
            shape, dt = aval_of(a)
            return jax.ShapeDtypeStruct(shape, to_jax(dt))
        if isinstance(a, torch.Tensor):
            return jax.ShapeDtypeStruct((), to_jax(a.dtype))
        return jax.ShapeDtypeStruct((), np.dtype(ir._POOL_OF[type(a)]))

    def collect(a, scalar):
        if isinstance(a, torch.Tensor) or type(a) is ValueArg:
            specs.append(spec_of(a))
        elif isinstance(a, _SCALAR_TYPES) and scalar and (NO_SPECIAL_SCALARS or (a != 0 and a != 1) or isinstance(a, complex)):
            specs.append(spec_of(a))
        elif isinstance(a, (list, tuple)):
            for x in a:
                collect(x, scalar)

    for i, a in enumerate(args):
        collect(a, i in e.info.scalar_pos)
    for k, v in (kwargs or {}).items():
        collect(v, k in e.info.scalar_kw)
    try:
        with lowering(compile_context()):
            outs = jax.eval_shape(lambda *xs: apply_entry(e, xs), *specs)
    except Exception as exc:  # noqa: BLE001 - report any lowering bug at the user's line
        raise op_error(e.info, args, kwargs, exc) from exc
    if len(outs) != len(e.out_avals):
        raise op_error(e.info, args, kwargs, ValueError(
            f"lowering returned {len(outs)} outputs, PyTorch expects {len(e.out_avals)}"))
    cast = []
    need = False
    for o, (shape, dt) in zip(outs, e.out_avals):
        if tuple(o.shape) != tuple(shape):
            raise op_error(e.info, args, kwargs, ValueError(
                f"lowering produced shape {tuple(o.shape)}, PyTorch expects {tuple(shape)}"))
        jd = to_jax(dt)
        if np.dtype(o.dtype) != jd:
            cast.append(jd)
            need = True
        else:
            cast.append(None)
    if need:
        e.cast = tuple(cast)


# ---------------------------------------------------------------------------
# the hot path

_Node = ir.Node
_OP = ir.OP


def entry_of(info, args, kwargs):
    """-> (the OpEntry of info(*args, **kwargs), operand values, operand hashes)."""
    try:
        key, ops, hs = walk_args(args, kwargs, info)
    except DeviceMismatch as e:
        raise device_mismatch_error(info.name, e.args[0]) from None
    e = info.memo.get(key)
    if e is None:
        e = info.memo[key] = make_entry(info, key, args, kwargs)
    return e, ops, hs


def trace_node(info, args, kwargs):
    """Record info(*args, **kwargs) as a node; -> (node, entry)."""
    e, ops, hs = entry_of(info, args, kwargs)
    info.traced += 1
    hs.append(e.hash)
    return _Node(_OP, e, tuple(ops), hash(tuple(hs))), e


# ---------------------------------------------------------------------------
# one node for a `_foreach_` call

class FusedEntry(OpEntry):
    """The entry of a fused `_foreach_` node: `parts` lists each element's own
    entry and how many of the node's operands it reads, in order."""
    __slots__ = ("parts",)


def _fused_lowering(*arrays):
    e = ctx.entry
    outs = []
    k = 0
    for sub, m in e.parts:
        outs.extend(apply_entry(sub, arrays[k:k + m]))
        k += m
    return tuple(outs)


# counted by the element ops' own counters (xla::add, ...), as element-wise tracing counts them
FOREACH = OpInfo("foreach", None, _fused_lowering)
_fused = {}   # the tuple of element entries -> their FusedEntry
_calls = {}   # a call's key (its elements' keys) -> (FusedEntry, element entries), or None
_ELEMENT = object()   # starts an element in a call's key


def trace_fused(info, calls, inplace=False):
    """One node computing `info`'s op (an op with one tensor result) on each
    (args, kwargs) of `calls`; -> (node, element entries), or None when an
    element's op has more than one result or (`inplace`: the result is written
    into args[0]) a result's shape or dtype is not its target's.

    The elements are walked into one key, looked up once: an optimizer's
    update walks each parameter's operands and nothing more per element."""
    key = [info, inplace]
    ops = []
    hs = []
    into = (key, ops, hs)
    try:
        for args, kwargs in calls:
            key.append(_ELEMENT)
            walk_args(args, kwargs, info, into)
    except DeviceMismatch as e:
        raise device_mismatch_error(info.name, e.args[0]) from None
    key = tuple(key)
    got = _calls.get(key, _calls)
    if got is _calls:
        if len(_calls) >= 4096:
            _calls.clear()
        got = _calls[key] = _fused_entries(info, calls, inplace)
    if got is None:
        return None
    fe, entries = got
    info.traced += len(entries)
    hs.append(fe.hash)
    return _Node(_OP, fe, tuple(ops), hash(tuple(hs))), entries


def _fused_entries(info, calls, inplace):
    """A call's key seen for the first time: each element's own entry (made on a
    memo miss, checked as element-wise tracing checks it), and their FusedEntry;
    None when the call cannot be one node (see trace_fused)."""
    entries = []
    counts = []
    for args, kwargs in calls:
        e, o, _ = entry_of(info, args, kwargs)
        if e.out_struct is not None or (inplace and e.out_avals[0] != args[0]._lazy.aval):
            return None
        entries.append(e)
        counts.append(len(o))
    key = tuple(entries)
    fe = _fused.get(key)
    if fe is None:
        if len(_fused) >= 4096:
            _fused.clear()
        fe = _fused[key] = _fused_entry(entries, counts)
    return fe, entries


def _fused_entry(entries, counts):
    fe = FusedEntry()
    fe.info = FOREACH
    fe.name = "foreach"
    fe.parts = tuple(zip(entries, counts))
    fe.static_key = tuple((e.name, e.static_key) for e in entries)
    fe.hash = hash(("foreach",) + tuple(e.hash for e in entries))
    fe.out_avals = [e.out_avals[0] for e in entries]
    fe.out_struct = (tuple, tuple(range(len(entries))))
    fe.template = tuple(Slot(i) for i in range(sum(counts)))
    fe.kwtemplate = {}
    fe.in_avals = [a for e in entries for a in e.in_avals]
    fe.common_dtype = None
    fe.cast = None
    return fe


def wrap(node, e):
    """New base tensors for a node's outputs, in the op's return structure."""
    if e.out_struct is None:
        return new_base((node, 0), e.out_avals[0])
    typ, struct = e.out_struct
    avals = e.out_avals
    out = []
    for s in struct:
        if s is None:
            out.append(None)
        elif type(s) is tuple:
            out.append([new_base((node, i), avals[i]) for i in s])
        else:
            out.append(new_base((node, s), avals[s]))
    return typ(out)
