"""A fuzz program as data: statements over named variables, rendered to Python and run.

A `Program` is a list of `Stmt`s. Each statement is one or a few lines of Python that
create or mutate variables named `v<N>`; `DEV` is the device the program runs on.
Creation statements keep their shape, dtype and values as data (`Stmt.create`), so the
shrinker can simplify them; every other statement is its source text plus the names it
binds (`defs`) and reads or writes (`uses`), so the shrinker can drop a statement together
with the ones that depend on it.

`execute(program, device)` runs a program on one device: statements that raise are
recorded (index, exception type, message) and the run goes on with the next one. On the
XLA device, `torch_xla.sync()` runs after each statement whose index is in
`program.barriers`.
"""
import dataclasses
import math
import re
import traceback

import torch

INF = float("inf")
NAN = float("nan")

DTYPE_NAMES = {
    torch.bool: "torch.bool", torch.uint8: "torch.uint8", torch.int32: "torch.int32",
    torch.int64: "torch.int64", torch.float16: "torch.float16",
    torch.bfloat16: "torch.bfloat16", torch.float32: "torch.float32",
    torch.float64: "torch.float64",
}
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.uint8, torch.int32, torch.int64)


def lit(v):
    """A Python literal for a scalar value (inf and nan through the names the
    programs define)."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return "-0.0"
        return repr(v)
    if isinstance(v, torch.dtype):
        return DTYPE_NAMES[v]
    if isinstance(v, (tuple, list)):
        inner = ", ".join(lit(x) for x in v)
        if isinstance(v, tuple) and len(v) == 1:
            inner += ","
        return f"({inner})" if isinstance(v, tuple) else f"[{inner}]"
    return repr(v)


def nest(flat, shape):
    """The nested-list literal of `flat` (row-major) in `shape`."""
    if not shape:
        return lit(flat[0])
    if len(shape) == 1:
        return "[" + ", ".join(lit(x) for x in flat) + "]"
    step = len(flat) // shape[0] if shape[0] else 0
    return "[" + ", ".join(nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


@dataclasses.dataclass
class Stmt:
    code: str = ""                 # source (ignored for creation statements)
    op: str = ""                   # family name: the signature of findings
    defs: tuple = ()               # names bound
    uses: tuple = ()               # names read or written
    touches: tuple = ()            # names whose values the statement may change (aliases)
    writes: tuple = ()             # names written in place (the generator's overlap check)
    ew: bool = True                # the write is elementwise (an identical alias is fine)
    guards: tuple = ()             # expressions true before it runs (eager): a valid program
    create: dict = None            # creation statements: shape, dtype, values, form, grad
    note: str = ""                 # why this form (ties, ...), shown in the repro

    def source(self):
        if self.create is None:
            return self.code
        return render_create(self.defs[0], self.create)

    def copy(self):
        c = dataclasses.replace(self)
        if self.create is not None:
            c.create = dict(self.create, values=list(self.create["values"]),
                            shape=tuple(self.create["shape"]))
        return c


def render_create(name, c):
    """Creation forms: a literal on DEV, a literal on the CPU moved with .to(DEV),
    or a factory on DEV (values are then those the factory makes)."""
    shape, dtype, values, form = tuple(c["shape"]), c["dtype"], c["values"], c["form"]
    dt = DTYPE_NAMES[dtype]
    n = math.prod(shape)
    if form == "arange":
        src = f"torch.arange({n}, dtype={dt}, device=DEV)"
        if len(shape) != 1:
            src += f".reshape({lit(tuple(shape))})"
    elif form == "full":
        src = f"torch.full({lit(tuple(shape))}, {lit(values[0])}, dtype={dt}, device=DEV)"
    elif form == "eye":
        src = f"torch.eye({shape[0]}, {shape[1]}, dtype={dt}, device=DEV)"
    elif n == 0:
        src = f"torch.zeros({lit(tuple(shape))}, dtype={dt}, device=DEV)"
    elif form == "to":
        src = f"torch.tensor({nest(values, shape)}, dtype={dt}).to(DEV)"
    else:
        src = f"torch.tensor({nest(values, shape)}, dtype={dt}, device=DEV)"
    if c.get("grad"):
        src += ".requires_grad_()"
    return f"{name} = {src}"


def factory_values(c):
    """The flat values a creation statement makes (factories included)."""
    shape, form = tuple(c["shape"]), c["form"]
    n = math.prod(shape)
    if form == "arange":
        return list(range(n))
    if form == "full":
        return [c["values"][0]] * n
    if form == "eye":
        r, k = shape
        return [1 if i == j else 0 for i in range(r) for j in range(k)]
    return list(c["values"])


@dataclasses.dataclass
class Program:
    seed: int
    stmts: list
    barriers: set = dataclasses.field(default_factory=set)  # sync after these statements
    final_sync: bool = True        # sync before the XLA run's values are read

    def copy(self):
        return Program(self.seed, [s.copy() for s in self.stmts], set(self.barriers), self.final_sync)

    def body_lines(self, indent="", sync="torch_xla.sync()", raised=None):
        """The program's lines; statements in `raised` (index -> text) are wrapped in
        try/except so the rest runs as in the fuzzer."""
        raised = raised or {}
        out = []
        for k, st in enumerate(self.stmts):
            src = st.source().split("\n")
            if st.note:
                out.append(f"{indent}# {st.note}")
            if k in raised:
                out.append(f"{indent}try:  # {raised[k]}")
                out += [f"{indent}    {line}" for line in src]
                out.append(f"{indent}except Exception as e:")
                out.append(f"{indent}    print('statement {k} raised', type(e).__name__, str(e).splitlines()[0])")
            else:
                out += [f"{indent}{line}" for line in src]
            if k in self.barriers:
                out.append(f"{indent}{sync}")
        return out

    def __str__(self):
        return "\n".join(self.body_lines())


VAR = re.compile(r"^v\d+$")


@dataclasses.dataclass
class Raise:
    index: int          # statement index
    where: str          # "stmt" or "barrier" (XLA sync after the statement) or "read"
    type: str
    msg: str
    frames: str = ""    # innermost frames of the traceback (file:function), for triage
    mro: tuple = ()     # the exception's classes (a subclass of eager's type is noted)

    def brief(self):
        return f"{self.where} {self.index}: {self.type}: {self.msg}"


@dataclasses.dataclass
class Run:
    ns: dict
    raises: list
    invalid: list = dataclasses.field(default_factory=list)   # (index, failed guard)


def _raise(k, where, e):
    return Raise(k, where, type(e).__name__, _first_line(e), _frames(e),
                 tuple(c.__name__ for c in type(e).__mro__))


def _frames(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    keep = [f"{f.filename.split('torch_xla/')[-1] if 'torch_xla/' in f.filename else f.filename.split('/')[-1]}"
            f":{f.name}:{f.lineno}" for f in tb[-4:]]
    return " < ".join(reversed(keep))


def _first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


def compile_program(prog):
    return [compile(st.source(), f"<fuzz stmt {k}>", "exec") for k, st in enumerate(prog.stmts)]


def execute(prog, device, sync=None, codes=None, check=None):
    """Run `prog` on `device`; `sync` is called at the program's barriers (the XLA run);
    `check(ns, stmt)` before each statement says why the program is not valid (or None)."""
    codes = codes or compile_program(prog)
    ns = {"torch": torch, "DEV": device, "inf": INF, "nan": NAN}
    raises = []
    invalid = []
    for k, code in enumerate(codes):
        if check is not None:
            why = check(ns, prog.stmts[k])
            if why:
                invalid.append((k, why))
        try:
            exec(code, ns)
        except Exception as e:  # noqa: BLE001 -- every exception is a result here
            raises.append(_raise(k, "stmt", e))
        if sync is not None and k in prog.barriers:
            try:
                sync()
            except Exception as e:  # noqa: BLE001
                raises.append(_raise(k, "barrier", e))
    if sync is not None and prog.final_sync:
        try:
            sync()
        except Exception as e:  # noqa: BLE001
            raises.append(_raise(len(codes), "barrier", e))
    live = {k: v for k, v in ns.items() if VAR.match(k)}
    return Run(live, raises, invalid)
