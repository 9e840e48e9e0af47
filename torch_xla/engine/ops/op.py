"""What the engine knows about an op: OpInfo (per aten overload or internal
op), OpEntry (per op at one set of avals and static arguments), and running
an entry's rule on JAX values."""
from ..base.dtypes import to_jax
from .context import ctx
from .numerics import cast


class Slot:
    """A placeholder in an argument template for operand number `i`."""
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i

    def __repr__(self):
        return f"%{self.i}"


class OpEntry:
    """What is known about one op at one set of avals and static arguments."""
    __slots__ = ("info", "name", "hash", "out_avals", "out_struct", "template", "kwtemplate",
                 "in_avals", "common_dtype", "cast", "static_key")

    def out_dtype(self, i=0):
        return to_jax(self.out_avals[i][1])

    def out_shape(self, i=0):
        return self.out_avals[i][0]


# every OpInfo made: the xla::<op> counters read their `traced` counts at a metrics flush
ALL_INFOS = []


class OpInfo:
    """Per-op facts, made once per aten overload (or internal op). `traced`
    counts the nodes traced since the counters were last read (upstream's
    xla::<op> counters count traced IR nodes, not executions)."""
    __slots__ = ("name", "func", "lowering", "scalar_pos", "scalar_kw", "memo", "meta", "check", "traced")

    def __init__(self, name, func, lowering, meta=None):
        self.traced = 0
        ALL_INFOS.append(self)
        self.name = name
        self.func = func
        self.lowering = lowering
        self.memo = {}
        self.meta = meta
        self.check = None
        self.scalar_pos = frozenset()
        self.scalar_kw = frozenset()
        if func is not None:
            pos, kw = set(), set()
            for i, a in enumerate(func._schema.arguments):
                ty = str(a.type)
                if ty in ("Scalar", "Scalar?", "number", "number?", "Tensor", "Tensor?", "Optional[number]"):
                    if a.kwarg_only:
                        kw.add(a.name)
                    else:
                        pos.add(i)
                        kw.add(a.name)
            self.scalar_pos = frozenset(pos)
            self.scalar_kw = frozenset(kw)

    def __repr__(self):
        return f"OpInfo({self.name})"


def _fill(t, arrays):
    tt = type(t)
    if tt is Slot:
        return arrays[t.i]
    if tt is tuple or tt is list:
        return tt(_fill(x, arrays) for x in t)
    return t


def fill_args(e, values):
    """(args, kwargs) of entry e's call with its operand slots filled from `values`."""
    args = _fill(e.template, values)
    kwargs = {k: _fill(v, values) for k, v in e.kwtemplate.items()} if e.kwtemplate else {}
    return args, kwargs


def apply_entry(e, arrays):
    """Run e's lowering on JAX values; returns the flat list of outputs."""
    args, kwargs = fill_args(e, arrays)
    prev = ctx.entry
    ctx.entry = e
    try:
        out = e.info.lowering(*args, **kwargs)
    finally:
        ctx.entry = prev
    if e.out_struct is None:
        outs = [out]
    else:
        outs = []
        for o in out:
            if o is None:
                continue
            if isinstance(o, (list, tuple)):
                outs.extend(o)
            else:
                outs.append(o)
    if e.cast is not None:
        outs = [cast(o, d) if d is not None else o for o, d in zip(outs, e.cast)]
    return outs
