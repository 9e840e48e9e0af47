"""The program generator: seeded random programs of small tensors.

The generator runs every statement it emits on eager CPU as it goes (the "shadow" run), so
each next statement is built from the variables' real shapes, dtypes and values. That is
how programs stay deterministic for eager:
  * writes with duplicate indices only where they accumulate or write one value;
  * sort/topk/cummax/... indices only where the slice has no ties (else `stable=True` or
    the values alone);
  * no float -> integer conversion of a non-finite or out-of-range value (undefined in C++);
  * an in-place write whose operand overlaps the target only when eager refuses it (then
    the refusal is the expected result), or when the two are the same elements in the same
    order;
  * an error eager raises from the values (integer division by zero, an index out of
    range, ...) is never kept: a lazy device cannot see values before it runs. Errors from
    shapes, dtypes and arguments are kept now and then: both runs must raise them.
"""
import math
import random
import re

import torch

from fuzz_program import FLOATS, INTS, INF, NAN, Program, Stmt, factory_values, lit

DTYPES = [torch.float32, torch.int64, torch.bool, torch.int32, torch.uint8,
          torch.float16, torch.bfloat16, torch.float64]
DTYPE_W = [30, 16, 8, 7, 6, 9, 9, 15]

# an eager error that depends on the values (a lazy device cannot raise it at the statement)
VALUE_ERRORS = re.compile(
    r"ZeroDivisionError|out of bounds|index out of range|Number of elements of source|"
    r"negative integer powers|must be nonnegative|masked_scatter|found NaN|invalid multinomial|"
    r"cannot be converted to type .* without overflow",
    re.I)
# ... except an overflow of a Python scalar (static, so checkable): kept by _static_overflow
# a write through a boolean mask whose value has other than 1 or the mask's count of rows:
# the device checks the count where the host next waits (deferred, like an index's range)
_MASK_COUNT = re.compile(r"cannot be broadcast to indexing result")


class Reject(Exception):
    pass


def _offsets(t, shape=None):
    """Storage element offsets of t (expanded to shape), flattened, and t's element size."""
    if shape is not None and tuple(t.shape) != tuple(shape):
        t = t.expand(shape)
    n = t.untyped_storage().nbytes() // t.element_size()
    base = torch.arange(max(n, 1))
    try:
        return torch.as_strided(base, t.shape, t.stride(), t.storage_offset()).flatten()
    except RuntimeError:
        return None


def _same_storage(a, b):
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.untyped_storage().nbytes() > 0)


def has_ties(t, dim=None):
    """Two equal elements along dim (nan == nan, -0.0 == 0.0); False for a bad dim."""
    try:
        return _has_ties(t, dim)
    except (IndexError, RuntimeError):
        return False


def _has_ties(t, dim):
    if t.numel() <= 1:
        return False
    x = t.detach()
    x = x.double() if x.dtype in FLOATS else x.long().double()
    if dim is None or x.dim() == 0:
        x = x.flatten()
        dim = 0
    x = x.movedim(dim, -1)
    if x.shape[-1] <= 1:
        return False
    x = torch.where(x == 0, torch.zeros_like(x), x)
    s = x.sort(-1).values
    eq = (s[..., 1:] == s[..., :-1]) | (s[..., 1:].isnan() & s[..., :-1].isnan())
    return bool(eq.any())


def mixed_zeros(t):
    if t.dtype not in FLOATS:
        return False
    z = t.detach() == 0
    sb = t.detach().signbit()
    return bool((z & sb).any()) and bool((z & ~sb).any())


def nan_or_inf(t):
    return t.dtype in FLOATS and not bool(t.detach().isfinite().all())


def broadcast(*shapes):
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        return None


def overlap_status(ns, st):
    """'ok' or why eager's result could depend on the order of its writes."""
    for w in st.writes:
        tw = ns.get(w)
        if not isinstance(tw, torch.Tensor) or tw.numel() == 0:
            continue
        ow = _offsets(tw)
        if ow is None or len(set(ow.tolist())) < ow.numel():
            return "internal"
        for u in st.uses:
            tu = ns.get(u)
            if u == w:
                if st.ew:
                    continue
                return "self"
            if not _same_storage(tw, tu) or tu.numel() == 0:
                continue
            if tw.element_size() != tu.element_size():
                return "partial"
            ou = _offsets(tu)
            if ou is None or not (set(ou.tolist()) & set(ow.tolist())):
                continue
            if st.ew and broadcast(tuple(tu.shape), tuple(tw.shape)) == tuple(tw.shape):
                oe = _offsets(tu, tuple(tw.shape))
                if oe is not None and torch.equal(oe, ow):
                    continue
            return "partial"
    return "ok"


def guards_ok(ns, st):
    """None, or the guard of st that fails in ns (a shrunk program can break one)."""
    for gd in st.guards:
        try:
            ok = eval(gd, dict(ns, **GUARD_NS))
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            return gd
    if st.op not in SHAPE_INPLACE:
        ov = overlap_status(ns, st)
        if ov != "ok":
            return f"overlap:{ov}"
    if _grad_into_int(ns, st):
        return "grad_into_int"
    return None


def _grad_into_int(ns, st):
    """Whether st writes a value that requires grad into an integer or bool tensor.
    Eager then makes the integer tensor require grad (FillBackward, CopySlices);
    for a tensor subclass, PyTorch's autograd refuses the same write ("Autograd not
    support dtype: Int") before any kernel of ours runs: not a program to compare."""
    written = [ns.get(w) for w in st.writes]
    if not any(isinstance(t, torch.Tensor) and not (t.dtype.is_floating_point or t.dtype.is_complex)
               for t in written):
        return False
    return any(isinstance(ns.get(u), torch.Tensor) and ns[u].requires_grad
               for u in st.uses if u not in st.writes)


def _fits(o, res):
    """Whether out= tensor o can take res without its storage growing. Eager grows the
    storage of a view that is too small under every tensor sharing it; the XLA device
    refuses that (a Base holds a fixed shape), with an error saying so."""
    if not isinstance(res, torch.Tensor) or tuple(o.shape) == tuple(res.shape) or not o._is_view():
        return True
    return o.storage_offset() + res.numel() <= o.untyped_storage().nbytes() // o.element_size()


def _noties(t, dim=None):
    return not has_ties(t, dim)


def _uniq(size, idx):
    return not idx or (size > 0 and len({i % size for i in idx}) == len(idx))


GUARD_NS = {"_noties": _noties, "_intok": lambda t, dt: _float_ok_for_int(t, dt)
            if isinstance(t, torch.Tensor) else True, "_uniq": _uniq, "_fits": _fits,
            "_no_gelu_split": lambda t: _no_gelu_split(t)}


class Gen:
    def __init__(self, seed, exclude=()):
        self.seed = seed
        self.r = random.Random(seed)
        self.exclude = set(exclude)
        self.stmts = []
        self.ns = self._fresh_ns()
        self.count = 0
        self.raises = 0
        r = self.r
        self.special = r.random() < 0.4      # inf, nan, -0.0 among the values
        self.big = r.random() < 0.15         # large and tiny magnitudes
        self.grad = r.random() < 0.2         # leaves that require grad
        self.max_raises = r.choice([0, 1, 1, 2]) if "raises" not in self.exclude else 0
        self.cur, self.adv_guards = None, []

    @staticmethod
    def _fresh_ns():
        return {"torch": torch, "DEV": "cpu", "inf": INF, "nan": NAN}

    # ----- variables
    def live(self, pred=None):
        out = [n for n, v in self.ns.items()
               if n.startswith("v") and n[1:].isdigit() and isinstance(v, torch.Tensor)]
        return [n for n in out if pred is None or pred(self.ns[n])]

    def numbers(self):
        return [n for n, v in self.ns.items()
                if n.startswith("v") and n[1:].isdigit() and isinstance(v, (bool, int, float))]

    def T(self, n):
        return self.ns[n]

    def pristine(self, n):
        """n is a creation's tensor nothing has written since."""
        made = [st for st in self.stmts if n in st.defs]
        return bool(made) and made[-1].create is not None and not any(
            n in st.touches for st in self.stmts)

    def new(self):
        self.count += 1
        return f"v{self.count - 1}"

    # ----- values
    def dtype(self, choices=None):
        if choices is None:
            return self.r.choices(DTYPES, DTYPE_W)[0]
        return self.r.choice(list(choices))

    def shape(self, rank=None, max_numel=60):
        r = self.r
        if rank is None:
            rank = r.choices([0, 1, 2, 3, 4], [10, 28, 35, 21, 6])[0]
        while True:
            dims = tuple(0 if r.random() < 0.03 else r.choices([1, 2, 3, 4, 5], [20, 30, 25, 15, 10])[0]
                         for _ in range(rank))
            if math.prod(dims) <= max_numel:
                return dims

    def value(self, dtype):
        r = self.r
        if dtype == torch.bool:
            return r.random() < 0.5
        if dtype == torch.uint8:
            if self.big and r.random() < 0.2:
                return r.choice([128, 200, 250, 255])
            return r.randint(0, 6)
        if dtype in (torch.int32, torch.int64):
            if self.big and r.random() < 0.15:
                hi = 2 ** 31 - 1 if dtype == torch.int32 else 2 ** 62
                return r.choice([hi, -hi - 1, 65536, -40000, 2 ** 20])
            return r.randint(-6, 6)
        if self.special and r.random() < 0.15:
            v = r.choice([INF, -INF, NAN, -0.0, 0.0])
        elif self.big and r.random() < 0.15:
            v = r.choice([1e30, -1e30, 3e38, 1e-30, -2e-38, 65504.0, 70000.0, 1e-7, 6e-8, 1e5, 1e10, -1e300])
        else:
            v = r.choice([
                lambda: float(r.randint(-5, 5)),
                lambda: r.randint(-12, 12) / 2,
                lambda: round(r.uniform(-4, 4), 3),
                lambda: round(r.uniform(0, 1), 4),
            ])()
        return float(v)    # the literal: both runs round it to the dtype the same way

    def scalar(self, kind=None, nonzero=False):
        """A Python scalar literal (bool, int or float)."""
        r = self.r
        kind = kind or r.choices(["bool", "int", "float"], [10, 40, 50])[0]
        while True:
            if kind == "bool":
                v = r.random() < 0.5
            elif kind == "int":
                v = r.randint(-3, 5) if not (self.big and r.random() < 0.2) else r.choice([300, 2 ** 31, -2 ** 40, 2 ** 62])
            else:
                if self.special and r.random() < 0.2:
                    v = r.choice([INF, -INF, NAN, -0.0])
                elif self.big and r.random() < 0.15:
                    v = r.choice([1e30, 1e-30, 70000.0, 1e300])
                else:
                    v = r.choice([0.5, -1.5, 2.0, 0.0, 1.0, 3.25, -0.1, 1e-3, 2.5])
            if not nonzero or v:
                return lit(v)

    def flat_values(self, shape, dtype):
        return [self.value(dtype) for _ in range(math.prod(shape))]

    # ----- statements
    def fresh(self, shape=None, dtype=None, grad=None, form=None, values=None):
        """Commit a creation statement now; returns its name."""
        r = self.r
        shape = self.shape() if shape is None else tuple(shape)
        dtype = self.dtype() if dtype is None else dtype
        if grad is None:
            grad = self.grad and dtype in FLOATS and r.random() < 0.5
        n = math.prod(shape)
        if form is None:
            form = r.choices(["lit", "to", "fac"], [60, 30, 10])[0]
            if form == "fac" or (values is None and n > 1 and r.random() < 0.05):
                opts = ["full"]
                if len(shape) >= 1 and dtype != torch.bool:
                    opts.append("arange")
                if len(shape) == 2:
                    opts.append("eye")
                form = r.choice(opts)
                if form == "arange" and dtype == torch.uint8 and n > 255:
                    form = "full"
        if values is None:
            values = self.flat_values(shape if form != "full" else (1,), dtype)
        c = {"shape": shape, "dtype": dtype, "values": values, "form": form, "grad": bool(grad)}
        if form == "full" and dtype in FLOATS and grad:
            c["form"] = "lit"
            c["values"] = values * n if len(values) == 1 else values
        name = self.new()
        st = Stmt(op="create", defs=(name,), create=c)
        try:
            self._exec(st)
        except RuntimeError:
            # torch.full refuses a value the dtype cannot hold (70000.0 in float16)
            c.update(form="lit", values=c["values"] * n)
            self._exec(st)
        self.stmts.append(st)
        return name

    def S(self, code, op, defs=(), uses=(), writes=(), ew=True, note="", guards=()):
        uses = tuple(dict.fromkeys(u for u in uses if u))
        return Stmt(code=code, op=op, defs=tuple(defs), uses=uses, writes=tuple(writes), ew=ew, note=note,
                    guards=tuple(guards))

    def pick(self, pred=None, fresh=0.3, shape=None, dtype=None, **kw):
        """An existing variable satisfying pred, or a fresh one."""
        c = self.live(pred)
        if c and self.r.random() >= fresh:
            return self.r.choice(c)
        if pred is not None and shape is None and dtype is None and c:
            return self.r.choice(c)
        n = self.fresh(shape, dtype, **kw)
        if pred is not None and not pred(self.T(n)):
            raise Reject
        return n

    def bshape(self, shape):
        """A shape that broadcasts with `shape` (now and then one that does not)."""
        r = self.r
        s = list(shape)
        k = r.random()
        if k < 0.03:
            return self.shape()
        if k < 0.35:
            return tuple(s)
        if k < 0.55 and s:
            return tuple(s[r.randint(1, len(s)):])
        if k < 0.8:
            return tuple(1 if r.random() < 0.5 else d for d in s)
        if k < 0.9 and len(s) < 4:
            return (r.choice([1, 2]),) + tuple(s)
        return ()

    def partner(self, a, dtype=None, scalar_p=0.25, nonzero=False):
        """The other operand of a binary op with tensor `a`: (expression, name or None)."""
        r = self.r
        t = self.T(a)
        if r.random() < scalar_p:
            return self.scalar(nonzero=nonzero), None
        if r.random() < 0.45:
            c = self.live(lambda u: broadcast(tuple(u.shape), tuple(t.shape)) is not None)
            if c:
                n = r.choice(c)
                return n, n
        dt = dtype or (t.dtype if r.random() < 0.5 else self.dtype())
        n = self.fresh(self.bshape(tuple(t.shape)), dt)
        return n, n

    def dim(self, t, bad=0.03):
        rank = max(t.dim(), 1)
        if self.r.random() < bad:
            return self.r.choice([rank, -rank - 1])
        return self.r.randint(-rank, rank - 1)

    def index_list(self, size, count, unique, neg=True):
        """count indices into a dim of `size` (negative ones too), unique positions if asked."""
        r = self.r
        if size == 0:
            if count:
                raise Reject
            return []
        if unique:
            if count > size:
                raise Reject
            pos = r.sample(range(size), count)
        else:
            pos = [r.randrange(size) for _ in range(count)]
        return [p - size if neg and r.random() < 0.3 else p for p in pos]

    def idx_lit(self, vals, shape=None, dtype=torch.int64):
        t = torch.tensor(vals, dtype=dtype)
        if shape is not None:
            t = t.reshape(shape)
        dt = "" if dtype == torch.int64 and t.numel() else f", dtype={lit(dtype)}"
        return f"torch.tensor({lit(t.tolist()) if t.dim() else lit(t.item())}{dt}, device=DEV)"

    # ----- running candidates on the shadow
    def _exec(self, st):
        exec(compile(st.source(), "<gen>", "exec"), self.ns)

    def _rebuild(self):
        self.ns = self._fresh_ns()
        for st in self.stmts:
            try:
                self._exec(st)
            except Exception:  # noqa: BLE001 -- raising statements raise again
                pass

    def _snapshot(self):
        out = {}
        for n in self.live():
            t = self.T(n)
            out[n] = (t, tuple(t.shape), t.stride(), t.dtype, t.detach().clone())
        return out

    def _bool_index(self, st):
        """The statement may index with a boolean mask (a literal or a bool tensor it reads)."""
        return "True" in st.code or "False" in st.code or any(
            isinstance(self.ns.get(n), torch.Tensor) and self.ns[n].dtype == torch.bool for n in st.uses)

    def _unchanged(self, snap):
        for n, (t, shape, stride, dtype, vals) in snap.items():
            cur = self.ns.get(n)
            if cur is not t or tuple(t.shape) != shape or t.stride() != stride or t.dtype != dtype:
                return False
            d = t.detach()
            if not torch.equal(torch.nan_to_num(d.double() if dtype in FLOATS else d, nan=7.0, posinf=8.0, neginf=9.0),
                               torch.nan_to_num(vals.double() if dtype in FLOATS else vals, nan=7.0, posinf=8.0, neginf=9.0)):
                return False
            if dtype in FLOATS and not torch.equal(d.signbit(), vals.signbit()):
                return False
        return True

    def attempt(self, fn):
        mark, count = len(self.stmts), self.count
        try:
            st = fn(self)
        except (Reject, IndexError, RuntimeError):
            st = None
        if st is None:
            self._rollback(mark, count, dirty=False)
            return False
        ov = guards_ok(self.ns, st)
        snap = self._snapshot()
        try:
            self._exec(st)
            err = None
        except Exception as e:  # noqa: BLE001
            err = e
        if err is None:
            if ov is not None:
                self._rollback(mark, count, dirty=True)
                return False
            st.touches = self._touched(st)
            self.stmts.append(st)
            return True
        msg = f"{type(err).__name__}: {err}"
        if (self.raises >= self.max_raises or self.r.random() > 0.4
                or (VALUE_ERRORS.search(msg) and not _static_overflow(msg, st))
                or (_MASK_COUNT.search(msg) and self._bool_index(st))
                or not self._unchanged(snap) or isinstance(err, (NameError, SyntaxError))):
            self._rollback(mark, count, dirty=True)
            return False
        self.raises += 1
        st.defs = ()
        self.stmts.append(st)
        return True

    def _touched(self, st):
        """Names sharing storage with what the statement wrote."""
        out = []
        for w in st.writes:
            tw = self.ns.get(w)
            for n in self.live():
                if n == w or _same_storage(self.T(n), tw):
                    out.append(n)
        return tuple(dict.fromkeys(out))

    def _rollback(self, mark, count, dirty):
        added = self.stmts[mark:]
        del self.stmts[mark:]
        self.count = count
        if dirty:
            self._rebuild()
        else:
            for st in added:
                for d in st.defs:
                    self.ns.pop(d, None)


def _static_overflow(msg, st):
    # "value cannot be converted to type uint8_t without overflow" for a Python scalar in
    # the source is decided before any value is read (not so for a tensor's value)
    others = [u for u in st.uses if u not in st.writes]
    return "without overflow" in msg and not others and "item()" not in st.code


# ----------------------------------------------------------------------------- ops
OPS = []
SHAPE_INPLACE = {"t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_"}


def op(weight, name=None):
    def deco(fn):
        OPS.append((name or fn.__name__, weight, fn))
        return fn
    return deco


def _float_ok_for_int(t, dtype):
    """Converting t to the integer dtype is defined (finite, in range)."""
    if t.dtype not in FLOATS or dtype in FLOATS or dtype == torch.bool:
        return True
    d = t.detach().double()
    if not bool(d.isfinite().all()):
        return False
    lo, hi = {torch.uint8: (0, 255), torch.int32: (-2 ** 31, 2 ** 31 - 1),
              torch.int64: (-2 ** 63, 2 ** 63 - 1024)}[dtype]
    return bool(((d.trunc() >= lo) & (d.trunc() <= hi)).all())


def _scalar_ok_for_int(s, dtype):
    if dtype in FLOATS or dtype == torch.bool:
        return True
    v = eval(s, {"inf": INF, "nan": NAN})
    if isinstance(v, float):
        if not math.isfinite(v):
            return False
        lo, hi = {torch.uint8: (0, 255), torch.int32: (-2 ** 31, 2 ** 31 - 1),
                  torch.int64: (-2 ** 63, 2 ** 63 - 1024)}[dtype]
        return lo <= math.trunc(v) <= hi
    return True


UNARY = ["abs", "neg", "sign", "sgn", "square", "floor", "ceil", "round", "trunc", "frac",
         "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
         "atanh", "sigmoid", "erf", "erfc", "erfinv", "lgamma", "digamma", "deg2rad", "rad2deg",
         "logical_not", "bitwise_not", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
         "signbit", "nan_to_num", "relu", "positive", "clone", "logit", "sinc", "i0", "angle"]
INPLACE_UNARY = ["abs_", "neg_", "sign_", "floor_", "ceil_", "round_", "trunc_", "frac_",
                 "reciprocal_", "sqrt_", "exp_", "log_", "sin_", "tanh_", "sigmoid_", "relu_",
                 "zero_", "square_", "logical_not_", "bitwise_not_", "nan_to_num_", "erf_", "rsqrt_"]
NN_UNARY = ["softplus", "gelu", "silu", "elu", "hardtanh", "leaky_relu", "mish", "hardsigmoid",
            "hardswish", "celu", "selu", "relu6", "logsigmoid", "softsign", "tanhshrink",
            "hardshrink", "softshrink"]


@op(12)
def unary(g):
    r = g.r
    a = g.pick()
    f = r.choice(UNARY)
    k = r.random()
    if f == "round" and r.random() < 0.3:
        call = f"torch.round({a}, decimals={r.choice([-1, 1, 2])})"
    elif f == "nan_to_num" and r.random() < 0.6:
        call = f"torch.nan_to_num({a}, nan={g.scalar('float')}, posinf={g.scalar('float')}, neginf={g.scalar('float')})"
    elif f == "logit" and r.random() < 0.5:
        call = f"torch.logit({a}, eps={r.choice([1e-6, 0.1])})"
    elif k < 0.6:
        call = f"torch.{f}({a})"
    else:
        call = f"{a}.{f}()"
    n = g.new()
    return g.S(f"{n} = {call}", f, (n,), (a,))


@op(6)
def nn_unary(g):
    r = g.r
    a = g.pick()
    f = r.choice(NN_UNARY)
    extra = ""
    if f == "gelu" and r.random() < 0.5:
        extra = ", approximate='tanh'"
    elif f == "softplus" and r.random() < 0.5:
        extra = f", beta={r.choice([0.5, 2.0, 1])}, threshold={r.choice([1, 20, 5.0])}"
    elif f in ("elu", "celu") and r.random() < 0.5:
        extra = f", alpha={r.choice([0.5, 2.0])}"
    elif f == "hardtanh" and r.random() < 0.5:
        extra = f", {r.choice([-2.0, -0.5])}, {r.choice([0.5, 3.0])}"
    elif f == "leaky_relu" and r.random() < 0.5:
        extra = f", {r.choice([0.2, 0.01, 1.5])}"
    elif f in ("hardshrink", "softshrink") and r.random() < 0.5:
        extra = f", {r.choice([0.25, 1.0])}"
    n = g.new()
    # where eager's vectorized and scalar loops disagree, there is no one answer to
    # compare with: gelu's oneDNN path (float32 / bfloat16, two or more elements) gives
    # nan at +inf, its own kernel inf; the shrinks' vectorized backward gives 0 at NaN,
    # the scalar tail the gradient
    gd = ()
    if f == "gelu" and not extra:
        gd = (f"_no_gelu_split({a})",)
    elif f in ("hardshrink", "softshrink"):
        gd = (f"not ({a}.requires_grad and {a}.isnan().any())",)
    return g.S(f"{n} = torch.nn.functional.{f}({a}{extra})", f, (n,), (a,), guards=gd)


def _no_gelu_split(t):
    return not (t.dtype in (torch.float32, torch.bfloat16) and t.numel() >= 2 and bool((t == float("inf")).any()))


@op(4)
def softmax(g):
    r = g.r
    a = g.pick()
    f = r.choice(["softmax", "log_softmax"])
    d = g.dim(g.T(a))
    dt = f", dtype={lit(g.dtype(FLOATS))}" if r.random() < 0.25 else ""
    n = g.new()
    form = r.random()
    if form < 0.5:
        code = f"{n} = torch.{f}({a}, {d}{dt})"
    else:
        code = f"{n} = torch.nn.functional.{f}({a}, dim={d}{dt})"
    return g.S(code, f, (n,), (a,))


@op(6)
def inplace_unary(g):
    r = g.r
    a = g.pick()
    f = r.choice(INPLACE_UNARY)
    return g.S(f"{a}.{f}()", f, (), (a,), writes=(a,))


BINARY_FN = ["add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod",
             "pow", "atan2", "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt",
             "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
             "bitwise_xor", "hypot", "copysign", "xlogy", "nextafter", "heaviside", "float_power",
             "bitwise_left_shift", "bitwise_right_shift"]
BINARY_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floor_divide",
              "%": "remainder", "**": "pow", "&": "bitwise_and", "|": "bitwise_or",
              "^": "bitwise_xor", "<": "lt", "<=": "le", "==": "eq", "!=": "ne", ">": "gt", ">=": "ge"}
TENSOR_ONLY = {"atan2", "maximum", "minimum", "fmax", "fmin", "hypot", "nextafter", "heaviside",
               "logical_and", "logical_or", "logical_xor"}


def _shift_ok(g, b):
    t = g.ns.get(b) if b else None
    if isinstance(t, torch.Tensor):
        return t.dtype == torch.bool or t.dtype in FLOATS or bool(((t >= 0) & (t < 8)).all())
    return True


@op(22)
def binary(g):
    r = g.r
    a = g.pick()
    form = r.random()
    n = g.new()
    if form < 0.4:
        sym = r.choice(list(BINARY_OPS))
        f = BINARY_OPS[sym]
        b, bn = g.partner(a)
        code = f"{n} = {b} {sym} {a}" if (bn is None and r.random() < 0.5) else f"{n} = {a} {sym} {b}"
        return g.S(code, f, (n,), (a, bn))
    f = r.choice(BINARY_FN)
    b, bn = g.partner(a, scalar_p=0.05 if f in TENSOR_ONLY else 0.25)
    if "shift" in f:
        if bn is None:
            b = str(r.randint(0, 7))
        elif not _shift_ok(g, bn):
            raise Reject
    extra = ""
    if f in ("add", "sub") and r.random() < 0.3:
        extra = f", alpha={g.scalar()}"
    elif f == "div" and r.random() < 0.5:
        extra = f", rounding_mode={r.choice(['floor', 'trunc', None])!r}"
    if r.random() < 0.5 or f in ("floor_divide",):
        code = f"{n} = torch.{f}({a}, {b}{extra})"
    else:
        code = f"{n} = {a}.{f}({b}{extra})"
    return g.S(code, f, (n,), (a, bn))


@op(4)
def scalar_first(g):
    """torch.<op>(scalar, tensor) and Python-number variables as operands."""
    r = g.r
    a = g.pick()
    nums = g.numbers()
    s = r.choice(nums) if nums and r.random() < 0.5 else g.scalar()
    f = r.choice(["pow", "sub", "mul", "add", "div", "remainder", "bitwise_and"])
    n = g.new()
    if f in ("pow", "remainder", "bitwise_and") and r.random() < 0.5:
        code = f"{n} = torch.{f}({s}, {a})"
    else:
        sym = {"pow": "**", "sub": "-", "mul": "*", "add": "+", "div": "/", "remainder": "%", "bitwise_and": "&"}[f]
        code = f"{n} = {s} {sym} {a}" if r.random() < 0.5 else f"{n} = {a} {sym} {s}"
    return g.S(code, f, (n,), (a, s if s in nums else None))


INPLACE_BINARY = ["add_", "sub_", "mul_", "div_", "pow_", "remainder_", "fmod_", "clamp_min_",
                  "clamp_max_", "augassign", "copy_", "lerp_", "logical_and_", "bitwise_or_",
                  "floor_divide_", "atan2_", "hypot_", "eq_", "lt_", "masked_fill_", "addcmul_", "addcdiv_"]


@op(16)
def inplace_binary(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    f = r.choice(INPLACE_BINARY)
    if f == "augassign":
        sym = r.choice(["+=", "-=", "*=", "/=", "//=", "%=", "&=", "|=", "**="])
        b, bn = g.partner(a)
        return g.S(f"{a} {sym} {b}", "iop" + sym, (), (a, bn), writes=(a,))
    if f == "copy_":
        b, bn = g.partner(a, scalar_p=0)
        bt = g.T(bn)
        if not _float_ok_for_int(bt, t.dtype):
            raise Reject
        return g.S(f"{a}.copy_({b})", f, (), (a, bn), writes=(a,), guards=(f"_intok({b}, {a}.dtype)",))
    if f == "masked_fill_":
        m = g.fresh(g.bshape(tuple(t.shape)), torch.bool)
        if r.random() < 0.7:
            v = g.scalar()
            if not _scalar_ok_for_int(v, t.dtype):
                raise Reject
            vn = None
        else:
            vn = g.fresh((), r.choice([t.dtype, g.dtype()]))
            v = vn
            if not _float_ok_for_int(g.T(vn), t.dtype):
                raise Reject
        return g.S(f"{a}.masked_fill_({m}, {v})", f, (), (a, m, vn), writes=(a,),
                   guards=(f"_intok({vn}, {a}.dtype)",) if vn else ())
    if f in ("lerp_",):
        b, bn = g.partner(a, scalar_p=0, dtype=t.dtype)
        w = g.scalar("float") if r.random() < 0.6 else g.fresh(g.bshape(tuple(t.shape)), t.dtype)
        return g.S(f"{a}.lerp_({b}, {w})", f, (), (a, bn, w if w.startswith("v") else None), writes=(a,))
    if f in ("addcmul_", "addcdiv_"):
        b, bn = g.partner(a, scalar_p=0)
        c, cn = g.partner(a, scalar_p=0)
        val = f", value={g.scalar()}" if r.random() < 0.4 else ""
        return g.S(f"{a}.{f}({b}, {c}{val})", f, (), (a, bn, cn), writes=(a,))
    b, bn = g.partner(a)
    if bn is None and not _scalar_ok_for_int(b, t.dtype):
        raise Reject
    extra = f", alpha={g.scalar()}" if f in ("add_", "sub_") and r.random() < 0.25 else ""
    return g.S(f"{a}.{f}({b}{extra})", f, (), (a, bn), writes=(a,))


@op(3)
def fill(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    k = r.random()
    if k < 0.5:
        v = g.scalar()
        if not _scalar_ok_for_int(v, t.dtype):
            raise Reject
        return g.S(f"{a}.fill_({v})", "fill_", (), (a,), writes=(a,))
    if k < 0.7:
        v = g.fresh((), r.choice([t.dtype, g.dtype()]))
        if not _float_ok_for_int(g.T(v), t.dtype):
            raise Reject
        return g.S(f"{a}.fill_({v})", "fill_", (), (a, v), writes=(a,), guards=(f"_intok({v}, {a}.dtype)",))
    if k < 0.85:
        return g.S(f"{a}.zero_()", "zero_", (), (a,), writes=(a,))
    n = g.new()
    f = r.choice(["zeros_like", "ones_like", "full_like", "empty_like"])
    if f == "full_like":
        v = g.scalar()
        if not _scalar_ok_for_int(v, t.dtype):
            raise Reject
        return g.S(f"{n} = torch.full_like({a}, {v})", f, (n,), (a,))
    if f == "empty_like":
        return g.S(f"{n} = torch.empty_like({a}).fill_(2)", f, (n,), (a,))
    dt = f", dtype={lit(g.dtype())}" if r.random() < 0.3 else ""
    return g.S(f"{n} = torch.{f}({a}{dt})", f, (n,), (a,))


@op(8)
def ternary(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    f = r.choice(["where", "where", "clamp", "clamp", "lerp", "addcmul", "addcdiv"])
    n = g.new()
    if f == "where":
        c = g.pick(lambda u: u.dtype == torch.bool and broadcast(tuple(u.shape), tuple(t.shape)) is not None,
                   fresh=0.6, shape=g.bshape(tuple(t.shape)), dtype=torch.bool)
        b, bn = g.partner(a)
        if r.random() < 0.2:
            a_expr, an = g.scalar(), None
        else:
            a_expr, an = a, a
        return g.S(f"{n} = torch.where({c}, {a_expr}, {b})", f, (n,), (c, an, bn))
    if f == "clamp":
        k = r.random()
        if k < 0.5:
            lo = g.scalar() if r.random() < 0.8 else "None"
            hi = g.scalar() if r.random() < 0.8 else "None"
            return g.S(f"{n} = torch.clamp({a}, {lo}, {hi})", f, (n,), (a,))
        lo, ln = g.partner(a, scalar_p=0)
        hi, hn = g.partner(a, scalar_p=0) if r.random() < 0.7 else ("None", None)
        return g.S(f"{n} = torch.clamp({a}, min={lo}, max={hi})", f, (n,), (a, ln, hn))
    if f == "lerp":
        b, bn = g.partner(a, scalar_p=0, dtype=t.dtype)
        w, wn = (g.scalar("float"), None) if r.random() < 0.5 else g.partner(a, scalar_p=0, dtype=t.dtype)
        return g.S(f"{n} = torch.lerp({a}, {b}, {w})", f, (n,), (a, bn, wn))
    b, bn = g.partner(a, scalar_p=0)
    c, cn = g.partner(a, scalar_p=0)
    val = f", value={g.scalar()}" if r.random() < 0.4 else ""
    return g.S(f"{n} = torch.{f}({a}, {b}, {c}{val})", f, (n,), (a, bn, cn))


@op(5)
def cast(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    dt = g.dtype()
    if not _float_ok_for_int(t, dt):
        raise Reject
    meth = {torch.float32: "float", torch.float64: "double", torch.float16: "half",
            torch.bfloat16: "bfloat16", torch.int64: "long", torch.int32: "int",
            torch.bool: "bool", torch.uint8: "byte"}[dt]
    n = g.new()
    k = r.random()
    if k < 0.4:
        code = f"{n} = {a}.to({lit(dt)})"
    elif k < 0.7:
        code = f"{n} = {a}.{meth}()"
    elif k < 0.8:
        code = f"{n} = {a}.type({lit(dt)})"
    elif k < 0.9:
        code = f"{n} = {a}.to(DEV, {lit(dt)}, copy=True)"
    else:
        b = g.pick()
        if not _float_ok_for_int(t, g.T(b).dtype):
            raise Reject
        return g.S(f"{n} = {a}.type_as({b})", "type_as", (n,), (a, b), guards=(f"_intok({a}, {b}.dtype)",))
    return g.S(code, "to", (n,), (a,), guards=(f"_intok({a}, {lit(dt)})",))


def _dtype_guard(a, dt):
    """A reduction's dtype= converts its input first: no undefined float -> int."""
    return (f"_intok({a}, {dt.split('=', 1)[1]})",) if dt else ()


REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "std",
              "var", "norm", "vector_norm", "logsumexp", "cumsum", "cumprod", "cummax", "cummin",
              "all", "any", "nansum", "nanmean", "count_nonzero", "aminmax", "var_mean",
              "std_mean", "median", "nanmedian"]


@op(18)
def reduction(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    f = r.choice(REDUCTIONS)
    n = g.new()
    kd = f", keepdim={r.random() < 0.5}" if r.random() < 0.5 else ""
    rank = t.dim()

    def dims():
        k = r.random()
        if k < 0.25:
            return None
        if k < 0.8 or rank < 2:
            return g.dim(t)
        return tuple(r.sample(range(-rank, rank), r.randint(1, rank)))

    if f in ("sum", "mean", "nansum", "nanmean", "amax", "amin", "all", "any", "count_nonzero",
             "logsumexp"):
        d = dims()
        if f == "logsumexp" and d is None:
            d = g.dim(t)
        dt = ""
        if f in ("sum", "mean", "nansum", "nanmean") and r.random() < 0.25:
            dt = f", dtype={lit(g.dtype())}"
        if f == "count_nonzero":
            kd = ""
        if d is None:
            code = f"{n} = {a}.{f}({dt[2:]})" if f not in ("amax", "amin") else f"{n} = torch.{f}({a})"
        else:
            code = f"{n} = torch.{f}({a}, {lit(d)}{kd}{dt})"
        return g.S(code, f, (n,), (a,), guards=_dtype_guard(a, dt))
    if f == "prod":
        if r.random() < 0.4:
            return g.S(f"{n} = torch.prod({a})", f, (n,), (a,))
        dt = f", dtype={lit(g.dtype())}" if r.random() < 0.25 else ""
        return g.S(f"{n} = torch.prod({a}, {g.dim(t)}{kd}{dt})", f, (n,), (a,), guards=_dtype_guard(a, dt))
    if f in ("max", "min", "median", "nanmedian"):
        if r.random() < 0.35:
            # eager's median of an empty integer tensor converts nan to the integer type
            gd = (f"{a}.numel() > 0 or {a}.is_floating_point()",) if "median" in f else ()
            return g.S(f"{n} = {a}.{f}()", f, (n,), (a,), guards=gd)
        d = g.dim(t)
        i = g.new()
        if f in ("median", "nanmedian") and (rank == 0 or has_ties(t, d if rank else None)):
            return g.S(f"{n} = torch.{f}({a}, {d}{kd}).values", f, (n,), (a,), note="ties: values only")
        return g.S(f"{n}, {i} = torch.{f}({a}, {d}{kd})", f, (n, i), (a,),
                   guards=(f"_noties({a}, {d})",) if f in ("median", "nanmedian") else ())
    if f in ("argmax", "argmin"):
        d = g.dim(t) if r.random() < 0.7 else None
        return g.S(f"{n} = torch.{f}({a}, {lit(d) if d is not None else 'None'}{kd})", f, (n,), (a,))
    if f in ("std", "var", "var_mean", "std_mean"):
        d = dims()
        corr = r.choice(["", ", correction=0", ", correction=2", ", unbiased=False"])
        if f in ("var_mean", "std_mean"):
            i = g.new()
            return g.S(f"{n}, {i} = torch.{f}({a}, {lit(d)}{corr}{kd})", f, (n, i), (a,))
        if d is None and r.random() < 0.5:
            return g.S(f"{n} = {a}.{f}()", f, (n,), (a,))
        return g.S(f"{n} = torch.{f}({a}, {lit(d)}{corr}{kd})", f, (n,), (a,))
    if f in ("norm", "vector_norm"):
        p = r.choice([2, 1, "inf", "-inf", 0, 3, 0.5, 2.5])
        p = {"inf": "inf", "-inf": "-inf"}.get(p, p)
        d = dims()
        dt = f", dtype={lit(r.choice(FLOATS))}" if r.random() < 0.15 else ""
        if f == "norm":
            return g.S(f"{n} = torch.norm({a}, {p}, {lit(d)}{kd}{dt})", f, (n,), (a,))
        return g.S(f"{n} = torch.linalg.vector_norm({a}, {p}, {lit(d)}{kd}{dt})", f, (n,), (a,))
    if f in ("cumsum", "cumprod"):
        dt = f", dtype={lit(g.dtype())}" if r.random() < 0.25 else ""
        return g.S(f"{n} = torch.{f}({a}, {g.dim(t)}{dt})", f, (n,), (a,), guards=_dtype_guard(a, dt))
    if f in ("cummax", "cummin"):
        d = g.dim(t)
        i = g.new()
        if rank and has_ties(t, d) or (rank == 0 and nan_or_inf(t)):
            return g.S(f"{n} = torch.{f}({a}, {d}).values", f, (n,), (a,), note="ties: values only")
        return g.S(f"{n}, {i} = torch.{f}({a}, {d})", f, (n, i), (a,), guards=(f"_noties({a}, {d})",))
    if f == "aminmax":
        i = g.new()
        d = g.dim(t) if r.random() < 0.6 else None
        dd = f", dim={d}" if d is not None else ""
        return g.S(f"{n}, {i} = torch.aminmax({a}{dd}{kd})", f, (n, i), (a,))
    raise Reject


@op(7)
def matmul(g):
    r = g.r
    f = r.choice(["mm", "bmm", "matmul", "addmm", "einsum", "dot", "mv", "outer", "baddbmm", "linear", "matmul_op"])
    dims = [r.choice([0, 1, 2, 3, 4]) if r.random() < 0.05 else r.choice([1, 2, 3, 4]) for _ in range(4)]
    bsz, nn_, k, m = dims
    dt = g.dtype(FLOATS) if r.random() < 0.75 else g.dtype()
    dt2 = dt if r.random() < 0.9 else g.dtype()
    n = g.new()

    def operand(shape, dtype):
        c = g.live(lambda u: tuple(u.shape) == tuple(shape) and u.dtype == dtype)
        if c and r.random() < 0.4:
            return r.choice(c)
        return g.fresh(shape, dtype)
    if f == "mm":
        a, b = operand((nn_, k), dt), operand((k, m), dt2)
        return g.S(f"{n} = torch.mm({a}, {b})", f, (n,), (a, b))
    if f == "bmm":
        a, b = operand((bsz, nn_, k), dt), operand((bsz, k, m), dt2)
        return g.S(f"{n} = torch.bmm({a}, {b})", f, (n,), (a, b))
    if f in ("matmul", "matmul_op"):
        sa = r.choice([(k,), (nn_, k), (bsz, nn_, k), (1, nn_, k)])
        sb = r.choice([(k,), (k, m), (bsz, k, m), (1, k, m)])
        a, b = operand(sa, dt), operand(sb, dt2)
        code = f"{n} = torch.matmul({a}, {b})" if f == "matmul" else f"{n} = {a} @ {b}"
        return g.S(code, "matmul", (n,), (a, b))
    if f == "addmm":
        c = operand(r.choice([(nn_, m), (m,), (1, m), ()]), dt)
        a, b = operand((nn_, k), dt), operand((k, m), dt2)
        ab = f", beta={g.scalar()}, alpha={g.scalar()}" if r.random() < 0.4 else ""
        return g.S(f"{n} = torch.addmm({c}, {a}, {b}{ab})", f, (n,), (c, a, b))
    if f == "baddbmm":
        c = operand(r.choice([(bsz, nn_, m), (nn_, m), (1, 1, m)]), dt)
        a, b = operand((bsz, nn_, k), dt), operand((bsz, k, m), dt2)
        ab = f", beta={g.scalar()}, alpha={g.scalar()}" if r.random() < 0.4 else ""
        return g.S(f"{n} = torch.baddbmm({c}, {a}, {b}{ab})", f, (n,), (c, a, b))
    if f == "dot":
        a, b = operand((k,), dt), operand((k,), dt2)
        return g.S(f"{n} = torch.dot({a}, {b})", f, (n,), (a, b))
    if f == "mv":
        a, b = operand((nn_, k), dt), operand((k,), dt2)
        return g.S(f"{n} = torch.mv({a}, {b})", f, (n,), (a, b))
    if f == "outer":
        a, b = operand((nn_,), dt), operand((m,), dt2)
        return g.S(f"{n} = torch.outer({a}, {b})", f, (n,), (a, b))
    if f == "linear":
        x, w = operand((nn_, k), dt), operand((m, k), dt)
        bias = operand((m,), dt) if r.random() < 0.6 else None
        return g.S(f"{n} = torch.nn.functional.linear({x}, {w}{', ' + bias if bias else ''})", f, (n,), (x, w, bias))
    eq, shapes = r.choice([
        ("ij,jk->ik", [(nn_, k), (k, m)]), ("bij,bjk->bik", [(bsz, nn_, k), (bsz, k, m)]),
        ("i,i->", [(k,), (k,)]), ("ij->ji", [(nn_, k)]), ("ij,j->i", [(nn_, k), (k,)]),
        ("ii->i", [(k, k)]), ("ij->", [(nn_, k)]), ("i,j->ij", [(nn_,), (m,)]),
        ("bij->bj", [(bsz, nn_, k)]), ("ij,ij->i", [(nn_, k), (nn_, k)]),
    ])
    ops = [operand(s, dt) for s in shapes]
    return g.S(f"{n} = torch.einsum({eq!r}, {', '.join(ops)})", "einsum", (n,), tuple(ops))


def _reshape_target(shape, r):
    n = math.prod(shape)
    if n == 0:
        return r.choice([(0,), (-1,), tuple(shape)[::-1], (0, 2)])
    fs = [d for d in range(1, n + 1) if n % d == 0]
    out = []
    rest = n
    for _ in range(r.randint(0, 3)):
        d = r.choice([d for d in fs if rest % d == 0])
        out.append(d)
        rest //= d
    out.append(rest)
    r.shuffle(out)
    if r.random() < 0.3:
        out[r.randrange(len(out))] = -1
    if r.random() < 0.03:
        out.append(2)
    return tuple(out)


def _slice_expr(t, r, adv=None):
    """A basic index expression for t (ints, slices with steps, None, ...)."""
    parts = []
    for i, d in enumerate(t.shape):
        k = r.random()
        if k < 0.25:
            parts.append(":")
        elif k < 0.45 and d > 0:
            parts.append(str(r.randrange(-d, d)))
        elif k < 0.5:
            parts.append("None")
            parts.append(":")
        else:
            lo = r.choice(["", str(r.randint(-d - 1, d + 1))])
            hi = r.choice(["", str(r.randint(-d - 1, d + 1))])
            st = r.choice(["", "", "2", "3"])
            parts.append(f"{lo}:{hi}" + (f":{st}" if st else ""))
    if parts and r.random() < 0.2:
        cut = r.randint(0, len(parts) - 1)
        parts = parts[:cut] + ["..."]
    if not parts:
        parts = [r.choice(["...", "None", ":" if False else "..."])]
    while parts and parts[-1] == ":" and r.random() < 0.5:
        parts.pop()
    return ", ".join(parts) if parts else "..."


VIEWS = ["view", "reshape", "transpose", "permute", "t", "squeeze", "unsqueeze", "expand",
         "narrow", "select", "slice", "diagonal", "unfold", "split", "chunk", "unbind",
         "as_strided", "movedim", "flatten", "unflatten", "mT", "detach", "view_dtype",
         "contiguous", "swapaxes", "T_index", "expand_as", "view_as"]


@op(20)
def view(g):
    r = g.r
    a = g.pick(fresh=0.2)
    t = g.T(a)
    f = r.choice(VIEWS)
    n = g.new()
    rank = t.dim()
    S = lambda code, **kw: g.S(f"{n} = {code}", f, (n,), (a,), **kw)  # noqa: E731
    if f in ("view", "reshape"):
        return S(f"{a}.{f}({lit(_reshape_target(tuple(t.shape), r))})")
    if f == "transpose" or f == "swapaxes":
        return S(f"{a}.{f}({g.dim(t)}, {g.dim(t)})")
    if f == "permute":
        p = list(range(rank))
        r.shuffle(p)
        p = [x - rank if r.random() < 0.2 else x for x in p]
        if r.random() < 0.03:
            p = p[:-1]
        return S(f"{a}.permute({lit(tuple(p))})")
    if f == "t":
        return S(f"{a}.t()")
    if f == "mT":
        return S(f"{a}.mT")
    if f == "squeeze":
        if r.random() < 0.4:
            return S(f"{a}.squeeze()")
        if r.random() < 0.2 and rank >= 2:
            return S(f"{a}.squeeze({lit(tuple(r.sample(range(rank), 2)))})")
        return S(f"{a}.squeeze({g.dim(t)})")
    if f == "unsqueeze":
        return S(f"{a}.unsqueeze({r.randint(-rank - 1, rank)})")
    if f == "expand":
        shp = [d if d != 1 or r.random() < 0.3 else r.choice([2, 3]) for d in t.shape]
        if r.random() < 0.3 and len(shp) < 4:
            shp = [r.choice([1, 2])] + shp
        if r.random() < 0.2 and shp:
            shp[r.randrange(len(shp))] = -1
        return S(f"{a}.expand({lit(tuple(shp))})")
    if f in ("expand_as", "view_as"):
        b = g.pick(lambda u: (broadcast(tuple(u.shape), tuple(t.shape)) == tuple(u.shape)) if f == "expand_as"
                   else u.numel() == t.numel())
        return g.S(f"{n} = {a}.{f}({b})", f, (n,), (a, b))
    if f == "narrow":
        if rank == 0:
            raise Reject
        d = g.dim(t, bad=0)
        size = t.shape[d]
        st = r.randint(-size, size) if size else 0
        ln = r.randint(0, size - (st % size if size and st < 0 else st)) if size else 0
        return S(f"{a}.narrow({d}, {st}, {max(ln, 0)})")
    if f == "select":
        if rank == 0 or 0 in t.shape:
            raise Reject
        d = g.dim(t, bad=0)
        size = t.shape[d]
        return S(f"{a}.select({d}, {r.randrange(-size, size)})")
    if f == "slice":
        return S(f"{a}[{_slice_expr(t, r)}]")
    if f == "T_index":
        return S(f"{a}[{r.choice(['None', '..., None', ':, None' if rank else 'None', '...'])}]")
    if f == "diagonal":
        if rank < 2:
            raise Reject
        d1, d2 = r.sample(range(rank), 2)
        return S(f"{a}.diagonal({r.randint(-2, 2)}, {d1}, {d2})")
    if f == "unfold":
        d = g.dim(t, bad=0)
        size = t.shape[d] if rank else 1
        return S(f"{a}.unfold({d}, {r.randint(0, size)}, {r.randint(1, 3)})")
    if f in ("split", "chunk", "unbind"):
        d = g.dim(t, bad=0.02)
        try:
            if f == "split":
                size = t.shape[d] if rank else 1
                if r.random() < 0.5 or size == 0:
                    arg = str(r.randint(1, max(size, 1)))
                else:
                    cuts, left = [], size
                    while left:
                        c = r.randint(1, left)
                        cuts.append(c)
                        left -= c
                    arg = lit(cuts)
                parts = torch.split(t, eval(arg), d)
                call = f"torch.split({a}, {arg}, {d})" if r.random() < 0.5 else f"{a}.split({arg}, {d})"
            elif f == "chunk":
                k = r.randint(1, 4)
                parts = torch.chunk(t, k, d)
                call = f"{a}.chunk({k}, {d})"
            else:
                parts = torch.unbind(t, d)
                call = f"{a}.unbind({d})"
        except (RuntimeError, IndexError):
            raise Reject
        if not parts or len(parts) > 5:
            raise Reject
        names = [n] + [g.new() for _ in parts[1:]]
        return g.S(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}", f, tuple(names), (a,))
    if f == "as_strided":
        if rank == 0 or not t.is_contiguous() or t.storage_offset() != 0 or t.numel() < 2:
            raise Reject
        total = t.numel()
        s1 = r.randint(1, 3)
        st1 = r.randint(1, 2)
        s0 = r.randint(1, 3)
        st0 = s1 * st1 + r.randint(0, 1)
        off = r.randint(0, 2)
        if off + (s0 - 1) * st0 + (s1 - 1) * st1 >= total:
            raise Reject
        return S(f"{a}.as_strided({lit((s0, s1))}, {lit((st0, st1))}, {off})")
    if f == "movedim":
        return S(f"{a}.movedim({g.dim(t)}, {g.dim(t)})")
    if f == "flatten":
        if rank < 1:
            return S(f"{a}.flatten()")
        s, e = sorted([r.randrange(rank), r.randrange(rank)])
        return S(f"{a}.flatten({s}, {e})")
    if f == "unflatten":
        if rank == 0:
            raise Reject
        d = g.dim(t, bad=0)
        size = t.shape[d]
        fs = [x for x in range(1, size + 1) if size and size % x == 0] or [1]
        x = r.choice(fs)
        return S(f"{a}.unflatten({d}, {lit((x, size // x if size else 0))})")
    if f == "detach":
        return S(f"{a}.detach()")
    if f == "contiguous":
        return S(f"{a}.contiguous()")
    if f == "view_dtype":
        pairs = {torch.float32: [torch.int32], torch.int32: [torch.float32],
                 torch.float16: [torch.bfloat16], torch.bfloat16: [torch.float16],
                 torch.int64: [torch.float64], torch.float64: [torch.int64],
                 torch.uint8: [torch.uint8]}
        if t.dtype not in pairs or not g.pristine(a):
            # the bits of a computed float would turn an ulp of rounding into a mismatch
            raise Reject
        dt = r.choice(pairs[t.dtype])
        if dt in FLOATS:
            # the bits of an integer seen as a float could be a signalling nan; fine, but the
            # nan payloads are not compared anyway
            pass
        return S(f"{a}.view({lit(dt)})")
    raise Reject


@op(4)
def shape_inplace(g):
    r = g.r
    a = g.pick(fresh=0.2)
    t = g.T(a)
    rank = t.dim()
    f = r.choice(["t_", "transpose_", "squeeze_", "unsqueeze_", "resize_", "swapdims_", "as_strided_"])
    if f == "t_":
        code = f"{a}.t_()"
    elif f in ("transpose_", "swapdims_"):
        code = f"{a}.{f}({g.dim(t)}, {g.dim(t)})"
    elif f == "squeeze_":
        code = f"{a}.squeeze_({g.dim(t)})" if r.random() < 0.6 else f"{a}.squeeze_()"
    elif f == "unsqueeze_":
        code = f"{a}.unsqueeze_({r.randint(-rank - 1, rank)})"
    elif f == "resize_":
        n = t.numel()
        shp = _reshape_target((r.randint(0, n),) if n else (0,), r)
        shp = tuple(abs(x) for x in shp)
        if math.prod(shp) > n:
            raise Reject
        code = f"{a}.resize_({lit(shp)})"
    else:
        if t.dim() == 0 or not t.is_contiguous() or t.numel() < 2 or t._base is not None:
            raise Reject
        code = f"{a}.as_strided_({lit((t.numel() // 2,))}, (2,), 0)" if t.numel() >= 2 else None
        if t.numel() % 2:
            code = f"{a}.as_strided_({lit(((t.numel() + 1) // 2,))}, (2,), 0)"
    return g.S(code, f, (), (a,), writes=(a,), ew=True)


def _adv_index(g, t, unique):
    """An advanced-index expression for t: (expression, uses, indexed shape or None)."""
    r = g.r
    rank = t.dim()
    if rank == 0:
        if r.random() < 0.5:
            m = g.fresh((), torch.bool)
            return m, (m,)
        raise Reject
    k = r.random()
    if k < 0.3:
        # a bool mask over a prefix of the dims
        p = r.randint(1, rank)
        shp = tuple(t.shape[:p])
        if r.random() < 0.5:
            m = g.fresh(shp, torch.bool, form="lit")
            return m, (m,)
        vals = [r.random() < 0.5 for _ in range(math.prod(shp))]
        mt = torch.tensor(vals, dtype=torch.bool).reshape(shp)
        return f"torch.tensor({lit(mt.tolist()) if mt.dim() else lit(mt.item())}, device=DEV)", ()
    d = r.randrange(rank)
    size = t.shape[d]
    cnt = r.randint(0 if r.random() < 0.1 else 1, 3)
    ishape = (cnt,) if r.random() < 0.8 or cnt < 2 else (1, cnt)
    ids = g.index_list(size, cnt, unique)
    if unique and ids:
        g.adv_guards.append(f"_uniq({g.cur}.shape[{d}], {lit(ids)})")
    idx = g.idx_lit(ids, ishape, dtype=torch.int64 if r.random() < 0.85 else torch.int32)
    pre = [":"] * d
    if d and r.random() < 0.3:
        pre = ["..."] if d == rank - 1 else pre
    parts = pre + [idx]
    if r.random() < 0.4 and d + 1 < rank:
        # a second index tensor broadcast with the first (one index when the positions
        # must be unique: the pairs stay unique)
        c2 = 1 if unique else cnt
        parts.append(g.idx_lit(g.index_list(t.shape[d + 1], c2, False), (c2,)))
    elif r.random() < 0.3 and d + 1 < rank:
        parts.append(r.choice(["1:", "::2", "0", ":"]))
    return ", ".join(parts), ()


@op(10)
def index_get(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    expr, uses = _adv_index(g, t, unique=False)
    n = g.new()
    return g.S(f"{n} = {a}[{expr}]", "index", (n,), (a,) + tuple(uses))


@op(10)
def index_set(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    if r.random() < 0.3:
        expr, uses = _slice_expr(t, r), ()
    else:
        g.cur, g.adv_guards = a, []
        expr, uses = _adv_index(g, t, unique=True)
    try:
        sub = eval(f"{a}[{expr}]", g.ns)
    except Exception:  # noqa: BLE001
        raise Reject
    k = r.random()
    if k < 0.4:
        v, vn = g.scalar(), None
        if not _scalar_ok_for_int(v, t.dtype):
            raise Reject
    else:
        vn = g.fresh(g.bshape(tuple(sub.shape)), t.dtype if r.random() < 0.7 else g.dtype())
        v = vn
        if not _float_ok_for_int(g.T(vn), t.dtype):
            raise Reject
    aug = r.random() < 0.2
    code = f"{a}[{expr}] {'+=' if aug else '='} {v}"
    gd = list(getattr(g, "adv_guards", [])) if "tensor(" in expr else []
    g.adv_guards = []
    if vn:
        gd.append(f"_intok({vn}, {a}.dtype)")
    return g.S(code, "setitem" if not aug else "setitem_add", (), (a, vn) + tuple(uses), writes=(a,), ew=False,
               guards=gd)


@op(10)
def indexed_write(g):
    r = g.r
    a = g.pick(lambda u: u.dim() >= 1)
    t = g.T(a)
    f = r.choice(["index_put_", "index_put_acc", "index_add_", "index_copy_", "index_fill_",
                  "scatter_", "scatter_value", "scatter_add_", "scatter_reduce", "put_", "masked_scatter_"])
    d = g.dim(t, bad=0)
    size = t.shape[d]
    if f in ("index_put_", "index_put_acc"):
        acc = f == "index_put_acc"
        cnt = r.randint(1, 3)
        ids = g.index_list(t.shape[0], cnt, unique=not acc)
        idx = g.idx_lit(ids, (cnt,))
        gd = [f"_intok({{v}}, {a}.dtype)"] + ([] if acc else [f"_uniq({a}.shape[0], {lit(ids)})"])
        vshape = (cnt,) + tuple(t.shape[1:])
        v = g.fresh(g.bshape(vshape) if r.random() < 0.3 else vshape, t.dtype if r.random() < 0.9 else g.dtype())
        if not _float_ok_for_int(g.T(v), t.dtype):
            raise Reject
        inplace = r.random() < 0.7
        acc_s = f", accumulate={acc}" if acc or r.random() < 0.5 else ""
        gd = [x.replace("{v}", v) for x in gd]
        if inplace:
            return g.S(f"{a}.index_put_(({idx},), {v}{acc_s})", "index_put_", (), (a, v), writes=(a,), ew=False,
                       guards=gd)
        n = g.new()
        return g.S(f"{n} = torch.index_put({a}, ({idx},), {v}{acc_s})", "index_put", (n,), (a, v), guards=gd)
    if f in ("index_add_", "index_copy_", "index_fill_"):
        cnt = r.randint(1, 3)
        ids = g.index_list(size, cnt, unique=f == "index_copy_", neg=False)
        idx = g.idx_lit(ids, (cnt,))
        gd = (f"_uniq({a}.shape[{d}], {lit(ids)})",) if f == "index_copy_" else ()
        if f == "index_fill_":
            v = g.scalar()
            if not _scalar_ok_for_int(v, t.dtype):
                raise Reject
            return g.S(f"{a}.index_fill_({d}, {idx}, {v})", f, (), (a,), writes=(a,), ew=False)
        sshape = list(t.shape)
        sshape[d] = cnt
        src = g.fresh(tuple(sshape), t.dtype if r.random() < 0.9 else g.dtype())
        alpha = f", alpha={g.scalar()}" if f == "index_add_" and r.random() < 0.3 else ""
        return g.S(f"{a}.{f}({d}, {idx}, {src}{alpha})", f, (), (a, src), writes=(a,), ew=False, guards=gd)
    if f in ("scatter_", "scatter_value", "scatter_add_", "scatter_reduce"):
        # index of a shape no larger than self's; unique target positions for plain writes
        ishape = [r.randint(1, s) if s else 0 for s in t.shape]
        reduce = r.choice(["sum", "prod", "mean", "amax", "amin"])
        uniq = f == "scatter_" or (f == "scatter_reduce" and reduce in ("sum", "prod", "mean")
                                   and t.dtype in FLOATS)
        if uniq:
            if ishape[d] > size:
                raise Reject
            cols = math.prod(ishape) // max(ishape[d], 1) if ishape[d] else 0
            vals = torch.stack([torch.tensor(r.sample(range(size), ishape[d])) for _ in range(cols)], -1) \
                if cols and ishape[d] else torch.zeros(ishape[d], cols, dtype=torch.long)
            rest = ishape[:d] + ishape[d + 1:]
            idx_t = vals.reshape([ishape[d]] + rest).movedim(0, d) if vals.numel() else torch.zeros(ishape, dtype=torch.long)
        else:
            idx_t = torch.tensor([r.randrange(size) for _ in range(math.prod(ishape))] if size else [],
                                 dtype=torch.long).reshape(ishape)
        if idx_t.numel() == 0 and 0 not in ishape:
            raise Reject
        idx = g.idx_lit(idx_t.flatten().tolist(), tuple(idx_t.shape))
        if f == "scatter_value":
            v = g.scalar()
            if not _scalar_ok_for_int(v, t.dtype):
                raise Reject
            return g.S(f"{a}.scatter_({d}, {idx}, {v})", "scatter_", (), (a,), writes=(a,), ew=False)
        sshape = [s + r.randint(0, 1) for s in ishape]
        src = g.fresh(tuple(sshape), t.dtype if r.random() < 0.9 else g.dtype())
        if f == "scatter_reduce":
            inc = r.random() < 0.5
            if r.random() < 0.5:
                return g.S(f"{a}.scatter_reduce_({d}, {idx}, {src}, {reduce!r}, include_self={inc})",
                           "scatter_reduce_", (), (a, src), writes=(a,), ew=False)
            n = g.new()
            return g.S(f"{n} = torch.scatter_reduce({a}, {d}, {idx}, {src}, {reduce!r}, include_self={inc})",
                       "scatter_reduce", (n,), (a, src))
        if r.random() < 0.3:
            n = g.new()
            fn = "scatter" if f == "scatter_" else "scatter_add"
            return g.S(f"{n} = torch.{fn}({a}, {d}, {idx}, {src})", fn, (n,), (a, src))
        return g.S(f"{a}.{f}({d}, {idx}, {src})", f, (), (a, src), writes=(a,), ew=False)
    if f == "put_":
        acc = r.random() < 0.5
        cnt = r.randint(1, 3)
        ids = g.index_list(t.numel(), cnt, unique=not acc)
        idx = g.idx_lit(ids, (cnt,))
        src = g.fresh((cnt,), t.dtype)
        return g.S(f"{a}.put_({idx}, {src}, accumulate={acc})", f, (), (a, src), writes=(a,), ew=False,
                   guards=() if acc else (f"_uniq({a}.numel(), {lit(ids)})",))
    m = g.fresh(g.bshape(tuple(t.shape)), torch.bool)
    src = g.fresh((t.numel() + r.randint(0, 2),), t.dtype)
    return g.S(f"{a}.masked_scatter_({m}, {src})", f, (), (a, m, src), writes=(a,), ew=False)


@op(8)
def gather_like(g):
    r = g.r
    a = g.pick(lambda u: u.dim() >= 1)
    t = g.T(a)
    f = r.choice(["index_select", "gather", "take_along_dim", "take", "masked_select", "masked_fill",
                  "nonzero", "where1"])
    n = g.new()
    d = g.dim(t, bad=0)
    size = t.shape[d]
    if f == "index_select":
        cnt = r.randint(0, 4)
        idx = g.idx_lit(g.index_list(size, cnt, False, neg=False), (cnt,) if r.random() < 0.9 else None)
        return g.S(f"{n} = torch.index_select({a}, {d}, {idx})", f, (n,), (a,))
    if f in ("gather", "take_along_dim"):
        ishape = [r.randint(1, s) if s else 0 for s in t.shape]
        ishape[d] = r.randint(0, 4)
        vals = [r.randrange(size) for _ in range(math.prod(ishape))] if size else []
        if math.prod(ishape) and not size:
            raise Reject
        idx = g.idx_lit(vals, tuple(ishape))
        if f == "gather":
            return g.S(f"{n} = torch.gather({a}, {d}, {idx})", f, (n,), (a,))
        return g.S(f"{n} = torch.take_along_dim({a}, {idx}, {d})", f, (n,), (a,))
    if f == "take":
        cnt = r.randint(0, 4)
        idx = g.idx_lit(g.index_list(t.numel(), cnt, False), (cnt,))
        return g.S(f"{n} = torch.take({a}, {idx})", f, (n,), (a,))
    m = g.pick(lambda u: u.dtype == torch.bool and broadcast(tuple(u.shape), tuple(t.shape)) is not None,
               fresh=0.6, shape=g.bshape(tuple(t.shape)), dtype=torch.bool)
    if f == "masked_select":
        return g.S(f"{n} = torch.masked_select({a}, {m})", f, (n,), (a, m))
    if f == "nonzero":
        return g.S(f"{n} = torch.nonzero({a})", f, (n,), (a,))
    if f == "where1":
        parts = [n] + [g.new() for _ in range(max(t.dim(), 1) - 1)]
        return g.S(f"{', '.join(parts)}{',' if len(parts) == 1 else ''} = torch.where({a})", "where1",
                   tuple(parts), (a,))
    v = g.scalar()
    if not _scalar_ok_for_int(v, t.dtype):
        raise Reject
    return g.S(f"{n} = {a}.masked_fill({m}, {v})", f, (n,), (a, m))


@op(6)
def cat_stack(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    f = r.choice(["cat", "cat", "stack", "hstack", "vstack"])
    k = r.randint(1, 3)
    names = [a]
    d = g.dim(t, bad=0.02) if f in ("cat", "stack") else 0
    for _ in range(k - 1):
        shp = list(t.shape)
        if f == "cat" and shp and -len(shp) <= d < len(shp):
            shp[d] = r.randint(0, 3)
        if r.random() < 0.05:
            shp = [0]
        c = g.live(lambda u: list(u.shape) == shp) if r.random() < 0.3 else []
        names.append(r.choice(c) if c else g.fresh(tuple(shp), t.dtype if r.random() < 0.6 else g.dtype()))
    n = g.new()
    lst = "[" + ", ".join(names) + "]"
    if f in ("cat", "stack"):
        if r.random() < 0.15:
            o = g.fresh((1,), g.dtype(), form="lit")
            return g.S(f"torch.{f}({lst}, {d}, out={o})", f + "_out", (), tuple(names) + (o,), writes=(o,), ew=False)
        return g.S(f"{n} = torch.{f}({lst}, {d})", f, (n,), tuple(names))
    return g.S(f"{n} = torch.{f}({lst})", f, (n,), tuple(names))


@op(6)
def sorting(g):
    r = g.r
    a = g.pick()
    t = g.T(a)
    f = r.choice(["sort", "sort", "argsort", "topk", "msort", "kthvalue"])
    n = g.new()
    d = g.dim(t)
    desc = r.random() < 0.5
    try:
        ties = has_ties(t, d if t.dim() else None)
    except (IndexError, RuntimeError):
        ties = False
    if f in ("sort", "argsort"):
        stable = r.random() < 0.3 or (ties and mixed_zeros(t)) or (ties and f == "argsort")
        st = ", stable=True" if stable else ""
        gd = () if stable else (f"_noties({a}, {d})",)
        if f == "argsort":
            return g.S(f"{n} = torch.argsort({a}, dim={d}, descending={desc}{st})", f, (n,), (a,), guards=gd)
        if ties and not stable:
            return g.S(f"{n} = torch.sort({a}, dim={d}, descending={desc}).values", f, (n,), (a,),
                       note="ties: values only")
        i = g.new()
        return g.S(f"{n}, {i} = torch.sort({a}, dim={d}, descending={desc}{st})", f, (n, i), (a,), guards=gd)
    if f == "msort":
        if ties and mixed_zeros(t):
            raise Reject
        return g.S(f"{n} = torch.msort({a})", f, (n,), (a,))
    size = t.shape[d] if t.dim() and -t.dim() <= d < t.dim() else 1
    kk = r.randint(0, size) if f == "topk" else r.randint(1, max(size, 1))
    if ties and mixed_zeros(t):
        raise Reject
    if f == "topk":
        largest = r.random() < 0.7
        if ties:
            return g.S(f"{n} = torch.topk({a}, {kk}, {d}, largest={largest}).values", f, (n,), (a,),
                       note="ties: values only")
        i = g.new()
        return g.S(f"{n}, {i} = torch.topk({a}, {kk}, {d}, largest={largest})", f, (n, i), (a,),
                   guards=(f"_noties({a}, {d})",))
    if ties:
        return g.S(f"{n} = torch.kthvalue({a}, {kk}, {d}).values", f, (n,), (a,), note="ties: values only")
    i = g.new()
    return g.S(f"{n}, {i} = torch.kthvalue({a}, {kk}, {d})", f, (n, i), (a,), guards=(f"_noties({a}, {d})",))


OUT_OPS = ["add", "mul", "sub", "div", "abs", "exp", "neg", "sum", "clamp", "where", "mm",
           "index_select", "cumsum", "maximum", "logical_and", "floor"]


@op(5)
def out_variant(g):
    r = g.r
    f = r.choice(OUT_OPS)
    a = g.pick()
    t = g.T(a)
    if f in ("add", "mul", "sub", "div", "maximum", "logical_and"):
        b, bn = g.partner(a, scalar_p=0.1 if f not in ("maximum", "logical_and") else 0)
        expr, uses = f"torch.{f}({a}, {b}, out={{o}})", (a, bn)
    elif f in ("abs", "exp", "neg", "floor"):
        expr, uses = f"torch.{f}({a}, out={{o}})", (a,)
    elif f == "sum":
        expr, uses = f"torch.sum({a}, {g.dim(t)}, out={{o}})", (a,)
    elif f == "cumsum":
        expr, uses = f"torch.cumsum({a}, {g.dim(t)}, out={{o}})", (a,)
    elif f == "clamp":
        expr, uses = f"torch.clamp({a}, {g.scalar()}, {g.scalar()}, out={{o}})", (a,)
    elif f == "where":
        c = g.fresh(g.bshape(tuple(t.shape)), torch.bool)
        b, bn = g.partner(a, scalar_p=0)
        expr, uses = f"torch.where({c}, {a}, {b}, out={{o}})", (c, a, bn)
    elif f == "mm":
        if t.dim() != 2:
            raise Reject
        b = g.fresh((t.shape[1], r.randint(1, 3)), t.dtype)
        expr, uses = f"torch.mm({a}, {b}, out={{o}})", (a, b)
    else:
        if t.dim() == 0:
            raise Reject
        d = g.dim(t, bad=0)
        idx = g.idx_lit(g.index_list(t.shape[d], 2, False, neg=False), (2,)) if t.shape[d] else g.idx_lit([], (0,))
        expr, uses = f"torch.index_select({a}, {d}, {idx}, out={{o}})", (a,)
    # the out tensor: the result's shape and dtype, another dtype, or any variable
    try:
        res = eval(expr.replace(", out={o}", ""), g.ns)
    except Exception:  # noqa: BLE001
        res = None
    k = r.random()
    if res is not None and k < 0.55:
        o = g.fresh(tuple(res.shape), res.dtype)
    elif res is not None and k < 0.75:
        o = g.fresh(tuple(res.shape), g.dtype())
    else:
        o = g.pick(fresh=0.3)
    if res is not None and not _float_ok_for_int(res, g.T(o).dtype):
        raise Reject
    ew = f not in ("sum", "mm", "index_select", "cumsum")
    plain = expr.replace(', out={o}', '')
    return g.S(expr.format(o=o), f + "_out", (), tuple(uses) + (o,), writes=(o,), ew=ew,
               guards=(f"_intok({plain}, {o}.dtype)", f"_fits({o}, {plain})"))


@op(3)
def item(g):
    r = g.r
    a = g.pick(lambda u: u.numel() == 1 or r.random() < 0.05)
    t = g.T(a)
    n = g.new()
    k = r.random()
    if t.dtype in FLOATS and r.random() < 0.3:
        return g.S(f"{n} = {a}.sum().item()", "item", (n,), (a,))
    if k < 0.2:
        if t.dtype in FLOATS and not _float_ok_for_int(t, torch.int64):
            raise Reject
        return g.S(f"{n} = int({a})", "item", (n,), (a,), guards=(f"_intok({a}, torch.int64)",))
    if k < 0.3:
        return g.S(f"{n} = bool({a})", "item", (n,), (a,))
    return g.S(f"{n} = {a}.item()", "item", (n,), (a,))


@op(2)
def delete(g):
    c = g.live()
    if len(c) < 3:
        raise Reject
    a = g.r.choice(c)
    return g.S(f"del {a}", "del", (), (a,))


@op(2)
def clone_detach(g):
    r = g.r
    a = g.pick()
    n = g.new()
    f = r.choice(["clone", "detach_clone", "contiguous_clone", "new_tensor_like"])
    if f == "clone":
        return g.S(f"{n} = {a}.clone()", "clone", (n,), (a,))
    if f == "detach_clone":
        return g.S(f"{n} = {a}.detach().clone()", "clone", (n,), (a,))
    if f == "contiguous_clone":
        return g.S(f"{n} = {a}.clone(memory_format=torch.contiguous_format)", "clone", (n,), (a,))
    return g.S(f"{n} = {a}.new_zeros({lit(g.shape())})", "new_zeros", (n,), (a,))


def backward(g):
    r = g.r
    c = g.live(lambda u: u.requires_grad and u.dtype in FLOATS and u.numel() > 0)
    if not c:
        raise Reject
    a = r.choice(c)
    k = r.random()
    if k < 0.6:
        code = f"{a}.sum().backward()"
    elif k < 0.8:
        code = f"({a} * {a}).mean().backward()" if g.T(a).numel() else f"{a}.sum().backward()"
    else:
        code = f"{a}.backward(torch.ones_like({a}))"
    return g.S(code, "backward", (), (a,))


NAME = re.compile(r"\bv(\d+)\b")


def _renumber(stmts):
    """v0, v1, ... in the order the program binds them."""
    order = {}
    for st in stmts:
        for d in st.defs if st.create is not None else [m.group(0) for m in NAME.finditer(st.code)]:
            order.setdefault(d, f"v{len(order)}")
    sub = lambda s: NAME.sub(lambda m: order.get(m.group(0), m.group(0)), s)  # noqa: E731
    for st in stmts:
        st.code = sub(st.code)
        st.guards = tuple(sub(x) for x in st.guards)
        st.defs = tuple(order[d] for d in st.defs)
        st.uses = tuple(order[d] for d in st.uses)
        st.writes = tuple(order[d] for d in st.writes)
        st.touches = tuple(order[d] for d in st.touches)


def generate(seed, exclude=(), max_stmts=None):
    g = Gen(seed, exclude)
    r = g.r
    ops = [(name, w, fn) for name, w, fn in OPS if name not in g.exclude]
    weights = [w for _, w, _ in ops]
    for _ in range(r.randint(1, 3)):
        g.fresh()
    target = max_stmts or r.randint(4, 14)
    tries = 0
    while len(g.stmts) < target and tries < 300:
        tries += 1
        name, _, fn = r.choices(ops, weights)[0]
        g.attempt(fn)
    if g.grad and "backward" not in g.exclude:
        for _ in range(r.choice([1, 1, 2])):
            for _ in range(10):
                if g.attempt(backward):
                    break
    _renumber(g.stmts)
    density = r.choice([0.0, 0.1, 0.3, 0.6])
    barriers = {k for k in range(len(g.stmts)) if r.random() < density}
    return Program(seed, g.stmts, barriers, final_sync=r.random() < 0.8)
