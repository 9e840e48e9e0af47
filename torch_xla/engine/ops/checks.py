"""Argument checks that explain a bad call in upstream's words.

A check is a small function registered for one or more aten ops (by overload
packet name). It looks at the call's arguments (tensors only by shape and dtype)
and returns upstream's message for what is wrong, or None. A check runs only
after the op has failed: tracing consults it when the meta kernel refuses a call
(a memo miss, so a good call pays nothing), and the dispatcher wraps the ops that
fail elsewhere (decompositions). The ops listed with `always=True`, which
PyTorch's meta kernels do not validate (`random_`, `uniform_`; a fill value that
overflows the dtype in `fill_`, `full`, ...), are checked before they run: there
a missing check would be a silent wrong answer.

Below the checks: eager's own dtype and rank checks, asked of eager on CPU
stand-ins (PROBED, `refusal`, `out_refusal`).
"""
import re
import warnings

import torch

CHECKS = {}
ALWAYS = set()
_CURRENT = {}  # the op a shared check is looking at

_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "s64", torch.int32: "s32", torch.int16: "s16", torch.int8: "s8",
    torch.uint8: "u8", torch.bool: "pred", torch.complex64: "c64", torch.complex128: "c128",
}


def check(*names, always=False):
    def register(fn):
        for n in names:
            CHECKS[n] = fn
            if always:
                ALWAYS.add(n)
        return fn
    return register


def diagnose(name, args, kwargs):
    """Upstream's message for this call of aten `name`, or None when the check
    finds nothing wrong (or there is no check)."""
    fn = CHECKS.get(name)
    if fn is None:
        return None
    try:
        _CURRENT["name"] = name
        return fn(args, kwargs or {})
    except Exception:  # noqa: BLE001  (a check must never hide the op's own error)
        return None


_SCALAR_TYPE = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


def scalar_type_name(dtype):
    """`Float`: a dtype as eager's messages name it (its ScalarType)."""
    return _SCALAR_TYPE.get(dtype, str(dtype).replace("torch.", ""))


def shape_text(t):
    """`f32[2,3]`: a tensor's type as upstream prints it in messages."""
    dt = _SHORT.get(t.dtype, str(t.dtype).replace("torch.", ""))
    return f"{dt}[{','.join(str(d) for d in t.shape)}]"


def _arg(args, kwargs, i, name, default=None):
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def _norm_dim(d, rank):
    return d + rank if d < 0 else d


def _dim_ok(d, rank):
    """Whether dim d is in range for a tensor of `rank` dims (a 0-d tensor takes -1
    and 0); out of range, eager's IndexError is the error, not a check's message."""
    r = max(rank, 1)
    return -r <= d < r


# ---------------------------------------------------------------------------
# broadcasting

@check("add", "sub", "rsub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum",
       "atan2", "hypot", "copysign", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
       "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "where")
def _broadcast(args, kwargs):
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if len(ts) < 2:
        return None
    a, b = ts[0], ts[1]
    ra, rb = a.dim(), b.dim()
    n = min(ra, rb)
    for k in range(n):
        # align from the right; report the leftmost dimension that disagrees
        ia, ib = ra - n + k, rb - n + k
        da, db = a.shape[ia], b.shape[ib]
        if da != db and da != 1 and db != 1:
            return (f"Shapes are not compatible for broadcasting: {shape_text(a)} vs. {shape_text(b)}. "
                    f"Expected dimension {ia} of shape {shape_text(a)} ({da}) to match dimension {ib} "
                    f"of shape {shape_text(b)} ({db}). Either that or that any of them is either 1 "
                    f"or unbounded. Try reshaping one of the tensors to match the other.")
    return None


@check("div")
def _div(args, kwargs):
    mode = kwargs.get("rounding_mode")
    if mode is not None and mode not in ("trunc", "floor"):
        return (f"div(): invalid rounding mode `{mode}`. Expected it to be either 'trunc', 'floor', "
                f"or be left unspecified.")
    return _broadcast(args, kwargs)


# ---------------------------------------------------------------------------
# shape ops

@check("flip")
def _flip(args, kwargs):
    x, dims = args[0], list(_arg(args, kwargs, 1, "dims", []))
    rank = x.dim()
    normed = [_norm_dim(d, rank) for d in dims]
    counts = {}
    for d in normed:
        counts[d] = counts.get(d, 0) + 1
    dup = sorted(d for d, c in counts.items() if c > 1)
    if not dup:
        return None
    found = ", ".join(f"{d} ({counts[d]} times)" for d in dup)
    return (f"flip(): expected each dimension to appear at most once. Found dimensions: {found}. "
            f"Consider changing dims from {dims} to {sorted(counts)}.")


@check("full", always=True)
def _full(args, kwargs):
    size = list(_arg(args, kwargs, 0, "size", []))
    if any(s < 0 for s in size):
        return (f"full(): expected concrete sizes (i.e. non-symbolic) to be positive values. "
                f"However found negative ones: {size}.")
    value = _arg(args, kwargs, 1, "fill_value")
    n = 1
    for s in size:
        n *= s
    return fill_error(kwargs.get("dtype") or _inferred_dtype(value), value, n)


# ---------------------------------------------------------------------------
# a Python number filled into a tensor of a narrower type

def _inferred_dtype(value):
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    return torch.get_default_dtype()


_FILLS = {}   # (dtype, number, size class) -> eager's message or None


def fill_error(dtype, value, numel):
    """Eager's message when filling `numel` elements of `dtype` with the Python
    number `value` overflows ("value cannot be converted to type uint8_t without
    overflow"), or None. Eager decides, on a CPU tensor of the same dtype and the
    same size class (its kernel checks a single element's conversion on another
    path than many elements': float16 takes 70000 alone, not in a pair)."""
    if not isinstance(value, (int, float, complex)) or isinstance(value, bool) or dtype == torch.bool:
        return None
    n = 0 if numel == 0 else 1 if numel == 1 else 2
    key = (dtype, type(value), value, n)
    got = _FILLS.get(key, key)
    if got is key:
        try:
            torch.empty(n, dtype=dtype, device="cpu").fill_(value)
            got = None
        except RuntimeError as e:
            got = str(e)
        except Exception:  # noqa: BLE001  (a dtype eager's CPU kernels do not fill)
            got = None
        if len(_FILLS) > 4096:
            _FILLS.clear()
        _FILLS[key] = got
    return got


@check("fill", always=True)
def _fill(args, kwargs):
    x, value = args[0], _arg(args, kwargs, 1, "value")
    return fill_error(x.dtype, value, x.numel())


@check("scalar_tensor", always=True)
def _scalar_tensor(args, kwargs):
    value = _arg(args, kwargs, 0, "s")
    return fill_error(kwargs.get("dtype") or _inferred_dtype(value), value, 1)


@check("full_like", always=True)
def _full_like(args, kwargs):
    x, value = args[0], _arg(args, kwargs, 1, "fill_value")
    return fill_error(kwargs.get("dtype") or x.dtype, value, x.numel())


@check("new_full", always=True)
def _new_full(args, kwargs):
    x, value = args[0], _arg(args, kwargs, 2, "fill_value")
    n = 1
    for s in _arg(args, kwargs, 1, "size", []):
        n *= s
    return fill_error(kwargs.get("dtype") or x.dtype, value, n)


@check("gather")
def _gather(args, kwargs):
    x, dim, index = args[0], _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    if not _dim_ok(dim, x.dim()):
        return None
    if x.dim() != index.dim():
        return (f"gather(): expected rank of input ({x.dim()}) and index ({index.dim()}) tensors "
                f"to be the same.")
    dim = _norm_dim(dim, x.dim())
    bad = [i for i in range(x.dim()) if i != dim and index.shape[i] > x.shape[i]]
    if bad:
        return (f"gather(): expected sizes of index {list(index.shape)} to be smaller or equal those "
                f"of input {list(x.shape)} on all dimensions, except on dimension {dim}. However, "
                f"that's not true on dimensions {bad}.")
    return None


@check("roll")
def _roll(args, kwargs):
    shifts = list(_arg(args, kwargs, 1, "shifts", []))
    dims = list(_arg(args, kwargs, 2, "dims", []) or [])
    if not shifts:
        return "roll(): expected `shifts` to have at least 1 element."
    if not dims and len(shifts) != 1:
        return (f"roll(): expected `shifts` {shifts} (size={len(shifts)}) to have exactly 1 element "
                f"when `dims` is empty.")
    if dims and len(dims) != len(shifts):
        return (f"roll(): expected `dims` {dims} (size={len(dims)}) to match the size of `shifts` "
                f"{shifts} (size={len(shifts)}).")
    return None


@check("expand")
def _expand(args, kwargs):
    x, sizes = args[0], list(_arg(args, kwargs, 1, "size", []))
    if len(sizes) < x.dim():
        return (f"expand(): expected the `input` tensor {shape_text(x)} (rank: {x.dim()}) to have a "
                f"rank smaller or equal to the given `sizes` {sizes} (rank: {len(sizes)}).")
    lead = len(sizes) - x.dim()
    for i in range(x.dim()):
        s, have = sizes[lead + i], x.shape[i]
        if s != -1 and s != have and have != 1:
            return (f"expand(): expected dimension {lead + i} of the given `sizes` {sizes} ({s}) to be "
                    f"-1, or equal to the size of the `input` tensor {shape_text(x)} at dimension {i} "
                    f"({have}).")
    return None


@check("cat")
def _cat(args, kwargs):
    ts = list(_arg(args, kwargs, 0, "tensors", []))
    dim = _arg(args, kwargs, 1, "dim", 0)
    ref = next((t for t in ts if not (t.dim() == 1 and t.shape[0] == 0)), None)
    if ref is None or not _dim_ok(dim, ref.dim()):
        return None
    d = _norm_dim(dim, ref.dim())
    for t in ts:
        if t is ref or (t.dim() == 1 and t.shape[0] == 0):
            continue
        if t.dim() != ref.dim() or any(t.shape[i] != ref.shape[i] for i in range(t.dim()) if i != d):
            return (f"cat(): cannot concatenate tensors of shape {shape_text(t)} with {shape_text(ref)} "
                    f"at dimension {d}. Expected shapes to be equal (except at dimension {d}) or that "
                    f"either of them was a 1D empty tensor of size (0,).")
    return None


# ---------------------------------------------------------------------------
# linear algebra

def _matrix(op, which, t):
    if t.dim() != 2:
        return f"{op}(): expected the {which} input tensor {shape_text(t)} to be a matrix (i.e. a 2D tensor)."
    return None


@check("mm")
def _mm(args, kwargs):
    a, b = args[0], args[1]
    msg = _matrix("mm", "first", a) or _matrix("mm", "second", b)
    if msg:
        return msg
    if a.shape[1] != b.shape[0]:
        return (f"mm(): cannot matrix-multiply tensors {shape_text(a)} and {shape_text(b)}. Expected "
                f"the size of dimension 1 of the first input tensor ({a.shape[1]}) to be equal the size "
                f"of dimension 0 of the second input tensor ({b.shape[0]}).")
    return None


@check("trace")
def _trace(args, kwargs):
    t = args[0]
    if t.dim() != 2:
        return f"trace(): expected the input tensor {shape_text(t)} to be a matrix (i.e. a 2D tensor)."
    return None


_ORD = {1: "1st", 2: "2nd", 3: "3rd"}


def _batched(op, named):
    """named: [(argument name, position, tensor), (..)] for the two batch operands."""
    for name, pos, t in named:
        if t.dim() != 3:
            return (f"{op}(): expected `{name}` {shape_text(t)} (a {t.dim()}D tensor), the {_ORD[pos]} "
                    f"input tensor, to be a 3D tensor.")
    (n1, p1, a), (n2, p2, b) = named
    if a.shape[0] != b.shape[0]:
        return (f"{op}(): expected the size of the batch dimension (i.e. dimension 0) of `{n1}` "
                f"{shape_text(a)} (batch dimension size: {a.shape[0]}), the {_ORD[p1]} input tensor, to "
                f"be the same as the size of the batch dimension of `{n2}` {shape_text(b)} (batch "
                f"dimension size: {b.shape[0]}), the {_ORD[p2]} input tensor.")
    if a.shape[2] != b.shape[1]:
        return (f"{op}(): cannot apply batch matrix-multiplication to `{n1}` {shape_text(a)}, the "
                f"{_ORD[p1]} input tensor, and to `{n2}` {shape_text(b)}, the {_ORD[p2]} input tensor. "
                f"Expected the size of dimension 2 of `{n1}` ({a.shape[2]}) to be equal the size of "
                f"dimension 1 of `{n2}` ({b.shape[1]}).")
    return None


@check("bmm")
def _bmm(args, kwargs):
    return _batched("bmm", [("input", 1, args[0]), ("mat2", 2, args[1])])


@check("baddbmm")
def _baddbmm(args, kwargs):
    return _batched("baddbmm", [("batch1", 2, args[1]), ("batch2", 3, args[2])])


# ---------------------------------------------------------------------------
# elementwise

@check("clamp")
def _clamp(args, kwargs):
    lo = _arg(args, kwargs, 1, "min")
    hi = _arg(args, kwargs, 2, "max")
    if lo is None and hi is None:
        return "clamp(): expected at least one of `min` or `max` arguments to be specified."
    return None


# ---------------------------------------------------------------------------
# random in place (no meta check upstream of us: these run always)

def _bounds(dtype):
    if dtype.is_floating_point:
        m = torch.finfo(dtype).max
        return -m, m
    if dtype == torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return info.min, info.max


def _fmt(v):
    return str(int(v)) if float(v).is_integer() else str(v)


@check("random_", always=True)
def _random_(args, kwargs):
    x = args[0]
    rest = list(args[1:])
    if len(rest) == 1 and "to" not in kwargs and "from" not in kwargs:
        lo, hi = 0, rest[0]
    else:
        lo = rest[0] if rest else kwargs.get("from", 0)
        hi = rest[1] if len(rest) > 1 else kwargs.get("to")
    if hi is None:
        return None
    if lo >= hi:
        return f"random_(): expected `from` ({_fmt(lo)}) to be smaller than `to` ({_fmt(hi)})."
    low, high = _bounds(x.dtype)
    for name, v in (("from", lo), ("to", hi - 1)):
        if v < low or v > high:
            side = "smaller than the lower" if v < low else "greater than the upper"
            return (f"random_(): expected `{name}` to be within the range [{_fmt(low)}, {_fmt(high)}]. "
                    f"However got value {_fmt(v)}, which is {side} bound.")
    return None


@check("uniform_", always=True)
def _uniform_(args, kwargs):
    lo = _arg(args, kwargs, 1, "from", 0.0)
    hi = _arg(args, kwargs, 2, "to", 1.0)
    if lo > hi:
        return f"uniform_(): expected `from` ({_fmt(lo)}) <= `to` ({_fmt(hi)})."
    return None


# ---------------------------------------------------------------------------
# pooling

@check("avg_pool3d", "max_pool3d", "max_pool3d_with_indices")
def _pool3d(args, kwargs):
    op = "avg_pool3d" if "avg" in _CURRENT.get("name", "avg") else "max_pool3d"
    for i, name, allowed in ((1, "kernel_size", (1, 3)), (2, "stride", (0, 1, 3)), (3, "padding", (1, 3))):
        v = _arg(args, kwargs, i, name)
        if v is None or isinstance(v, int):
            continue
        v = list(v)
        if len(v) not in allowed:
            return f"{op}(): expected argument {name} {v} (size: {len(v)}) to have size of 3."
    return None


# ---------------------------------------------------------------------------
# factories

@check("arange")
def _arange(args, kwargs):
    nums = [a for a in args if isinstance(a, (int, float))]
    if any(isinstance(v, float) and v != v for v in nums):
        return f"unsupported range: {' -> '.join(str(v) for v in nums[:2])}"
    return None


# ---------------------------------------------------------------------------
# eager's own dtype checks
#
# PyTorch's meta kernels skip checks its CPU kernels make: sub with a bool,
# var/std of integers, argmax/argmin/relu of bool, mm of two dtypes, index_put
# of another dtype; and give pow(bool_t, True) int64 where eager gives bool. Some
# refuse in other words than eager ("mean(): could not infer output dtype" for
# var_mean of integers) or with a bug of their own (index_select's out-of-range
# dim: "list assignment index out of range"). For the ops PROBED names, the meta
# function (run by tracing on a memo miss, so a traced call pays nothing) also
# runs the op in eager on CPU stand-ins: tensors of the same dtypes and ranks
# holding one element `fill` per non-empty dim (so shapes broadcast, dims stay in
# range and index stand-ins 0 are valid). What eager raises is raised, its type and message;
# eager's result dtypes replace the meta kernel's. Where the meta kernel refuses
# first, eager's words replace its own when the arguments are small enough to
# stand in at their real shapes (the error may be about them).

PROBED = {
    # elementwise arithmetic (bool operands, integer powers, result types)
    "sub": 1, "rsub": 1, "pow": 1, "float_power": 1,
    # reductions that refuse dtypes (var and std over two elements: one would make eager
    # warn about the degrees of freedom, a warning torch delivers after we return)
    "var": (1, 2), "std": (1, 2), "var_mean": (1, 2), "std_mean": (1, 2), "argmax": 1, "argmin": 1,
    "relu": 1,
    # matrix products of two dtypes
    "mm": 1, "bmm": 1, "addmm": 1, "addbmm": 1, "baddbmm": 1, "addmv": 1, "mv": 1, "dot": 1, "vdot": 1,
    # indexed writes: the source's dtype must be the destination's (indices 0)
    "index_put": 0, "_index_put_impl": 0, "_unsafe_index_put": 0,
    # meta kernels that take any dim (eager's IndexError, DimensionError here) or
    # check in another order than eager
    "sort": 1, "cummax": 1, "cummin": 1, "index_select": 0, "index_reduce": 0, "cat": 1,
}


REAL_SHAPES_MAX = 1 << 16   # elements per argument that stand in at their real shape


def _stand_in(a, fill, real):
    if isinstance(a, torch.Tensor) and a.device.type in ("meta", "xla"):
        fill, size = fill if isinstance(fill, tuple) else (fill, 1)
        if fill is None:   # integers 0 (a valid index), floats 1
            fill = 1 if a.dtype.is_floating_point or a.dtype.is_complex else 0
        # empty dims stay empty (cat skips a legacy 1-d empty tensor; [0] broadcasts as [0])
        shape = tuple(a.shape) if real else tuple(0 if d == 0 else size for d in a.shape)
        return torch.full(shape, fill, dtype=a.dtype, device="cpu")
    if isinstance(a, (list, tuple)):
        return type(a)(_stand_in(x, fill, real) for x in a)
    return a


# dtypes eager's CPU kernels cover only in part ("add_stub" not implemented for
# 'UInt32'): no eager answer to take, so no probe
_PARTIAL = frozenset(getattr(torch, n) for n in (
    "uint16", "uint32", "uint64", "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n))


def _partial(a):
    if isinstance(a, torch.Tensor):
        return a.dtype in _PARTIAL
    if isinstance(a, (list, tuple)):
        return any(_partial(x) for x in a)
    return False


def _small(a, limit=REAL_SHAPES_MAX):
    if isinstance(a, torch.Tensor):
        return a.numel() <= limit
    if isinstance(a, (list, tuple)):
        return all(_small(x, limit) for x in a)
    return True


def small(args, kwargs=None):
    """Whether every tensor argument is small enough to stand in at its real shape."""
    return _small(args) and _small(list((kwargs or {}).values()))


def probe(op, args, kwargs, fill=1, real=False):
    """Run aten `op` in eager on CPU stand-ins of its (meta or XLA) tensor
    arguments (one element per dim, or `real` shapes); eager's exception
    propagates. Returns eager's result (None for dtypes eager's CPU kernels
    cover only in part). `fill`: the stand-ins' value, or
    (value, size per dim)."""
    if _partial(args) or _partial(list((kwargs or {}).values())):
        return None
    sargs = tuple(_stand_in(a, fill, real) for a in args)
    skw = {k: _stand_in(v, fill, real) for k, v in (kwargs or {}).items()}
    return run_quietly(op, sargs, skw)


def run_quietly(op, args, kwargs):
    """op on plain CPU tensors, eager's warnings (var of one element, a resized
    out=) dropped; no dispatch mode of the user's (a flop counter, a logger) sees it."""
    with warnings.catch_warnings(), torch._C._DisableTorchDispatch():
        warnings.simplefilter("ignore")
        return op(*args, **kwargs)


def eager_error(op, args, kwargs, fill=1, real=False):
    """The exception eager raises for `op` on stand-ins of args, or None; with
    `real`, None also where an argument is too large to stand in at its shape."""
    if real and not (_small(args) and _small(list((kwargs or {}).values()))):
        return None
    try:
        probe(op, args, kwargs, fill, real)
    except Exception as e:  # noqa: BLE001  (whatever eager raises is the answer)
        return e
    return None


def _eager_dtypes(out, eager):
    """The meta result `out` with the dtypes of eager's result where they differ."""
    if eager is None:
        return out
    if isinstance(out, torch.Tensor) and isinstance(eager, torch.Tensor):
        if out.dtype == eager.dtype:
            return out
        return torch.empty(out.shape, dtype=eager.dtype, device=out.device)
    if isinstance(out, (list, tuple)) and isinstance(eager, (list, tuple)) and len(out) == len(eager):
        return type(out)(_eager_dtypes(o, e) for o, e in zip(out, eager))
    return out


def _probed_meta(op, inner, fill):
    def meta_fn(*args, **kwargs):
        try:
            out = inner(*args, **kwargs) if inner is not None else op(*args, **kwargs)
        except Exception:
            err = eager_error(op, args, kwargs, fill, real=True)
            if err is not None:
                raise err from None   # eager's words for what the meta kernel refused
            raise
        return _eager_dtypes(out, probe(op, args, kwargs, fill))
    meta_fn.probes = True   # eager already runs: no dtype probe on top (refusal below)
    return meta_fn


def install_probes(meta_table):
    """Register the probing meta functions of PROBED's functional overloads in
    `meta_table` (registry.META), around any meta function already there."""
    for name, fill in PROBED.items():
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
                continue   # in-place and out= run their functional twin
            inner = meta_table.get(op) or meta_table.get(packet)
            meta_table[op] = _probed_meta(op, inner, fill)


# ---------------------------------------------------------------------------
# what eager refuses from dtypes, ranks and empty dims alone
#
# Every CPU kernel dispatches on its operands' dtype and refuses the ones it
# was not built for: NotImplementedError: "bitwise_and_cpu" not implemented for
# 'Float' (bitwise ops of floats, softmax/gelu/hypot/frac of integers, abs/ceil/
# remainder/median of bool, ...). Lowerings would compute those anyway (XLA has
# a softmax of integers) or fail in their own words, so on a memo miss tracing
# asks eager (`refusal`): the op runs on CPU stand-ins of its tensors (same
# dtypes and ranks, one element per non-empty dim, 1 for floats and 0, a valid
# index, for integers), and when eager refuses them in one of the ways
# `FAITHFUL` lists, its exception is the op's.
# Those are the refusals stand-ins reproduce exactly, since they depend only on
# what stand-ins keep (dtypes, ranks, which dims are empty, static arguments):
# a kernel's dtype refusal, a few dtype checks the meta kernels skip (topk of
# bool, heaviside of two dtypes, index_add_'s source dtype, integer addcdiv), a
# reduction over an empty dim, cat of a 0-dim tensor. Anything else eager says
# about stand-ins (an index out of range, zero probabilities, a kernel larger
# than its input) is about their values and sizes, not the call's, and is not
# taken. A refusal of Half or BFloat16 alone (`cholesky_cpu` of bfloat16, while
# float32 runs) is a gap of the CPU kernels, not a rule of the op: the device
# computes it, as upstream does. Decisions are kept per op and stand-in, so a new
# shape of an op already asked costs a dictionary probe.

_REFUSED = re.compile(r'^"[^"]+" not implemented for \'(\w+)\'$')
FAITHFUL = (
    (NotImplementedError, _REFUSED),
    (RuntimeError, re.compile(r"^\w+ does not support bool dtypes on CPU$")),                      # topk
    (RuntimeError, re.compile(r"^\w+ is not yet implemented for tensors with different dtypes\.$")),  # heaviside
    (RuntimeError, re.compile(r"^\w+\(\): self \(\w+\) and source \(\w+\) must have the same scalar type$")),
    (RuntimeError, re.compile(r"^\w+\(\): self and source expected to have the same dtype, but got ")),
    (RuntimeError, re.compile(r"^Integer division with addcdiv is no longer supported")),
    (IndexError, re.compile(r"^\w+(\(\))?: Expected reduction dim -?\d+ to have non-zero size\.$")),
    (RuntimeError, re.compile(r"^\w+\(\): Expected reduction dim to be specified for input\.numel\(\) == 0")),
    (RuntimeError, re.compile(r"^zero-dimensional tensor \(at position \d+\) cannot be concatenated$")),
)
_HALF_NAMES = ("Half", "BFloat16")
_BIG = 1 << 20                  # elements: a probe's stand-in result above this is not computed
_RETRY_MAX = 1 << 12            # elements per argument asked again at its real shape
_DECIDED = {}                   # (op, stand-in key) -> (exception type, message) or None
_PLAN = {}                      # op -> None (never probed) or whether size arguments need a look


def faithful(e):
    """Whether eager's exception `e` on stand-ins is one FAITHFUL lists."""
    return any(type(e) is t and p.search(str(e)) for t, p in FAITHFUL)


def _key_of(a, real=False):
    # on the dispatch path of decompositions: attributes that cost least (not .device)
    if isinstance(a, torch.Tensor):
        if a.is_cpu:   # a CPU 0-dim operand joins as itself
            return ("c", a.dtype)
        shape = a.shape
        if real:
            return (a.dtype, tuple(shape))
        return (a.dtype, len(shape), tuple(d == 0 for d in shape) if 0 in shape else ())
    if isinstance(a, (list, tuple)):
        return (type(a),) + tuple(_key_of(x, real) for x in a)
    if type(a) is float or type(a) is complex:
        return type(a)          # a scalar operand's value picks no kernel
    try:
        hash(a)
    except TypeError:
        return repr(a)
    return (type(a), a)


def _plan(op):
    """None when `op` is never probed (not aten's, no tensor argument, a write,
    a view); else whether it takes sizes (a result as large as they say)."""
    if op in _PLAN:
        return _PLAN[op]
    plan = None
    schema = op._schema
    tensor_typed = any("Tensor" in str(a.type) for a in schema.arguments)
    writes = any(a.alias_info is not None for a in schema.arguments) or \
        any(r.alias_info is not None for r in schema.returns)
    if schema.name.startswith("aten::") and tensor_typed and not writes:
        plan = any(str(a.type) in ("int", "Optional[int]", "List[int]", "Optional[List[int]]")
                   for a in schema.arguments)
    _PLAN[op] = plan
    return plan


def _has_tensor(a):
    if isinstance(a, torch.Tensor):
        return not a.is_cpu
    if isinstance(a, (list, tuple)):
        return any(_has_tensor(x) for x in a)
    return False


def _numel(out):
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (list, tuple)):
        return sum(_numel(o) for o in out)
    return 0


def _meta_stand_in(a):
    if isinstance(a, torch.Tensor) and a.device.type != "cpu":
        return torch.empty(tuple(0 if d == 0 else 1 for d in a.shape), dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_meta_stand_in(x) for x in a)
    return a


_UNSURE = "unsure"   # eager raised what FAITHFUL does not list: the stand-ins' fault or not


def _refused(op, args, kwargs, real=False):
    """What eager refuses on stand-ins of args, as (type, message), when FAITHFUL
    lists it; None when eager runs; _UNSURE when it raises something else
    (k out of range for a one-element stand-in may hide the refusal)."""
    seeded = torch.Tag.nondeterministic_seeded in op.tags
    state = torch.default_generator.get_state() if seeded else None
    try:
        probe(op, args, kwargs, fill=None, real=real)
    except Exception as e:  # noqa: BLE001  (what eager raises is sorted below)
        return (type(e), str(e)) if faithful(e) else _UNSURE
    finally:
        if seeded:   # the CPU generator is the user's: a probe draws nothing from it
            torch.default_generator.set_state(state)
    return None


def _wider(a):
    if isinstance(a, torch.Tensor) and a.device.type != "cpu" and a.dtype in (torch.float16, torch.bfloat16):
        return torch.empty(a.shape, dtype=torch.float32, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_wider(x) for x in a)
    return a


def _half_gap(op, args, kwargs, got, real=False):
    """got, a refusal (type, message), or None where it refuses a half type that
    the op takes as float32 (a gap of the CPU kernels, not a rule of the op)."""
    if got is None or got is _UNSURE:
        return got
    if got[0] is NotImplementedError and _REFUSED.match(got[1]).group(1) in _HALF_NAMES:
        wider = _refused(op, tuple(_wider(a) for a in args), {k: _wider(v) for k, v in (kwargs or {}).items()}, real)
        if wider is None or wider is _UNSURE:
            return None
    return got


def refusal(op, args, kwargs, out=None):
    """The exception eager raises for aten `op` from these arguments' dtypes,
    ranks and empty dims alone (FAITHFUL), or None. args: meta (or XLA)
    tensors, Python values. `out`: the meta result at the real shapes when
    known (when the op takes sizes, a result larger than `_BIG` elements is not
    computed on stand-ins: `new_zeros` is as large there)."""
    plan = _plan(op)
    if plan is None or not (_has_tensor(args) or _has_tensor(list((kwargs or {}).values()))):
        return None
    try:
        key = (op, tuple(_key_of(a) for a in args),
               tuple((k, _key_of(v)) for k, v in (kwargs or {}).items()))
        hash(key)
    except TypeError:
        return None
    if key in _DECIDED:
        got = _DECIDED[key]
    else:
        got = None
        fits = True
        if plan and (out is None or _numel(out) > _BIG):
            try:
                fits = _numel(op(*(_meta_stand_in(a) for a in args),
                                  **{k: _meta_stand_in(v) for k, v in (kwargs or {}).items()})) <= _BIG
            except Exception:  # noqa: BLE001  (refused on stand-ins: eager refuses before it allocates)
                fits = True
        if fits:
            got = _half_gap(op, args, kwargs, _refused(op, args, kwargs))
        _DECIDED[key] = got
    if got is _UNSURE:
        # eager refused the one-element stand-ins otherwise (topk's k, kthvalue's k, a
        # view's sizes): asked again at the real shapes when they are small (a few
        # thousand elements: this runs the op), the answer kept per shapes
        got = None
        if _small(args, _RETRY_MAX) and _small(list((kwargs or {}).values()), _RETRY_MAX):
            rkey = ("real", op, tuple(_key_of(a, True) for a in args),
                    tuple((k, _key_of(v, True)) for k, v in (kwargs or {}).items()))
            if rkey in _DECIDED:
                got = _DECIDED[rkey]
            else:
                got = _half_gap(op, args, kwargs, _refused(op, args, kwargs, real=True), real=True)
                if got is _UNSURE:
                    got = None
                _DECIDED[rkey] = got
    return None if got is None else got[0](got[1])


def fresh(e, message=None):
    """An exception of e's type and message (or `message`) with no traceback or notes
    of its own."""
    message = str(e) if message is None else message
    try:
        return type(e)(message)
    except Exception:  # noqa: BLE001  (a class that takes other arguments)
        return RuntimeError(message)


def refused_call(op, args, kwargs):
    """For a call the meta kernel refused: what eager raises when FAITHFUL lists
    it and it is what eager raises first (asked at the real shapes where they
    are small: a bad shape may come before the dtype), or None."""
    if _plan(op) is None:
        return None
    if not small(args, kwargs):
        return refusal(op, args, kwargs)
    got = _half_gap(op, args, kwargs, _refused(op, args, kwargs, real=True), real=True)
    return None if got is None or got is _UNSURE else got[0](got[1])


# ---------------------------------------------------------------------------
# out= tensors of another dtype than the result's
#
# Eager casts a result into an out= tensor of another dtype where the result
# type can be cast to it (`add(f32, 1, out=f64)`), and refuses elsewhere, in
# each kernel's words: "result type Double can't be cast to the desired output
# type Long", "Found dtype Half but expected BFloat16" (floor), "Expected out
# tensor to have dtype float, but got double instead" (mm), TypeError for cat.
# Eager decides on stand-ins: its error is the call's when the same call with
# out= tensors of the result's dtypes passes (so the error is about the dtypes).

_OUT_DECIDED = {}


def out_refusal(op, args, kwargs, wanted):
    """Eager's error for the out= tensors of `op` whose dtypes are not the
    result's (`wanted`: out argument name -> result dtype), or None. args and
    kwargs: meta tensors and Python values, out= tensors among kwargs."""
    try:
        key = (op, tuple(_key_of(a) for a in args), tuple((k, _key_of(v)) for k, v in kwargs.items()))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _OUT_DECIDED:
        got = _OUT_DECIDED[key]
    else:
        got = None
        fill = PROBED.get(op.overloadpacket.__name__, 1)   # index stand-ins 0 where an op reads them
        fill = fill[0] if isinstance(fill, tuple) else fill
        err = eager_error(op, args, kwargs, fill)
        if err is not None:
            fixed = dict(kwargs)
            for name, dtype in wanted.items():
                fixed[name] = torch.empty(kwargs[name].shape, dtype=dtype, device="meta")
            if eager_error(op, args, fixed, fill) is None:
                got = (type(err), str(err))
        if key is not None:
            _OUT_DECIDED[key] = got
    return None if got is None else got[0](got[1])
