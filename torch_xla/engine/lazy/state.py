"""What an XLA tensor holds: the one owner of its lazy state.

A tensor on the `xla` device carries one object, `t._lazy`:

- `Base`: storage of its own. `value` is an IR value (node, output index):
  device data once computed, an op node while pending. `aval` is its
  (shape tuple, torch dtype), `device` the index of its XLA device. `gen`
  changes whenever the value does (a write, a barrier that computed it).
  `prev_data` is the data node it held before its first write since it was
  last computed: the buffer a full barrier may donate to the new value.
- `View`: a window on a `Base` (`base`), reached by `chain`, the view steps
  (op entry, output index) from the base's value. `value` caches the view's
  value and is valid while `gen` equals the base's; a barrier may compute it
  as data of its own. A view with an empty chain aliases its whole base (a
  Parameter after `.to()`): it always reads the base's value, caches nothing
  and is never an output of a graph of its own.

Several tensors may read one `Base`: a base tensor and its views, or a tensor
that an in-place view op (`t_`, `unsqueeze_`, ...) turned into a view of the
storage it had, whose older views keep reading that storage as eager
PyTorch's do.

Only this module writes these fields and `t._lazy`; other modules read them
and call the methods and functions here. It also keeps the registries a
barrier starts from: the bases that became pending (`pending`) and the views
whose cached value derives from pending IR (`pending_views`), as weak
references.
"""
import sys
import weakref

from ..ir import node as ir

_OP = ir.OP
_DATA = ir.DATA
_SCALAR = ir.SCALAR
_Node = ir.Node
_ref = weakref.ref

pending = []        # weakrefs to Bases that became pending since the last barrier
pending_views = []  # weakrefs to Views whose value was derived from pending IR since then
_retired = [0]      # entries of `pending` dropped so far (CreateXlaTensor reads the total)


class Base:
    """Storage of one XLA tensor value (see the module docstring)."""
    __slots__ = ("value", "aval", "gen", "prev_data", "device", "__weakref__")

    def __init__(self, value, aval, device=0):
        self.value = value
        self.aval = aval
        self.gen = 0
        self.prev_data = None
        self.device = device
        if value[0].kind == _OP:
            pending.append(_ref(self))

    @property
    def is_pending(self):
        return self.value[0].kind == _OP

    def data_node(self):
        """The data leaf holding the value, or None while it is pending or a scalar."""
        node = self.value[0]
        return node if node.kind == _DATA else None

    def write(self, v):
        """v becomes the value (an in-place write or an upload into the storage)."""
        old = self.value
        self.value = v
        self.gen += 1
        if old[0].kind == _DATA:
            if self.prev_data is None:
                self.prev_data = old[0]
            if v[0].kind == _OP:
                pending.append(_ref(self))
        elif old[0].kind == _SCALAR and v[0].kind == _OP:
            pending.append(_ref(self))
        elif old[0].kind == _OP and v[0].kind == _DATA:
            # an upload into a fresh `empty` (tensor.to("xla"), torch.tensor(...,
            # device="xla")): nothing is pending any more
            drop_last_pending(self)

    def computed(self, array, expected=None):
        """The value is now device data `array`; with `expected`, only if the value
        is still that IR value (another thread may have written it meanwhile).
        -> whether it was stored."""
        if expected is not None and self.value is not expected:
            return False
        self.value = (ir.result_node(array, *self.aval), 0)
        self.gen += 1
        self.prev_data = None
        return True

    def restore(self, v):
        """Put back a value the storage held before (a captured step undoes the
        writes of its trace: the executable computes them instead)."""
        self.value = v
        self.gen += 1
        self.prev_data = None

    def forget_pending(self):
        """Drop pending IR: the value becomes a placeholder of the same aval (no
        data), until written again (upstream's _clear_pending_irs)."""
        if self.value[0].kind != _OP:
            return
        self.value = (ir.data_node(None, *self.aval), 0)
        self.gen += 1
        self.prev_data = None

    def placed(self, array, leaf=None):
        """The data was laid out anew (an SPMD annotation of device data): same
        value, another buffer, never donated as the old one. `leaf`: the new
        data node itself (a placeholder laid out, ir.placeholder_node)."""
        self.value = (leaf if leaf is not None else ir.data_node(array, *self.aval), 0)
        self.gen += 1
        self.prev_data = None


class View:
    """A window on a Base (see the module docstring)."""
    __slots__ = ("base", "chain", "aval", "value", "gen", "__weakref__")

    def __init__(self, base, chain, aval, value, gen):
        self.base = base
        self.chain = chain
        self.aval = aval
        self.value = value
        self.gen = gen
        if chain and value[0].kind == _OP:
            pending_views.append(_ref(self))

    def current(self):
        """The view's value now: the cached one while the base is unchanged,
        else derived again from the base's value."""
        base = self.base
        if not self.chain:
            return base.value
        if self.gen == base.gen:
            return self.value
        v = base.value
        for step in self.chain:
            v = apply_step(step, v)
        self.value = v
        self.gen = base.gen
        pending_views.append(_ref(self))
        return v

    def written(self, v):
        """The view was written with value v (already scattered into the base)."""
        self.value = v
        self.gen = self.base.gen
        if v[0].kind == _OP and self.chain:
            # a barrier computes it beside its base, as a view derived by reading:
            # else the next graph re-derives it from the base (a gradient accumulated
            # into a view alternated between two graphs)
            pending_views.append(_ref(self))

    def computed(self, array, expected):
        """A barrier computed the view's value `expected` as `array`."""
        if self.value is expected:
            self.value = (ir.result_node(array, *self.aval), 0)
            self.gen = self.base.gen

    def is_current(self):
        return self.gen == self.base.gen


def apply_step(step, v):
    """The IR value of one view step (entry, output index) applied to value v."""
    entry, idx = step
    return (_Node(_OP, entry, (v,), hash((v[0].hash + v[1], entry.hash))), idx)


# -- which object a tensor holds ---------------------------------------------------

def value_of(t):
    """The IR value tensor t reads now (a view's derived from its base)."""
    s = t._lazy
    return s.value if type(s) is Base else s.current()


def base_of(t):
    """The Base t reads: its own, or its view's."""
    s = t._lazy
    return s if type(s) is Base else s.base


def whole_base(t):
    """The Base t holds whole: its own, or the one a view with no steps aliases;
    None for a real view."""
    s = t._lazy
    if type(s) is Base:
        return s
    return s.base if not s.chain else None


def storage_shared(t):
    """Whether anything beside t reads the Base t holds whole (a view of it, a
    tensor that shares it): each of those holds a reference to that Base, so a
    count above t's own says so. Another holder (a frame, a capture) can only
    make the answer True, never hide a reader."""
    s = t._lazy
    b = s if type(s) is Base else s.base
    # this call's references: `b`, getrefcount's argument, and `s` when it is b
    return sys.getrefcount(b) > (4 if b is s else 3)


def is_view(t):
    return type(t._lazy) is View


def make_base(t, v, aval, device=0):
    """t holds a new Base of value v."""
    t._lazy = Base(v, aval, device)


def make_view(t, base, chain, aval, v, gen):
    """t is a view of `base` through `chain`."""
    t._lazy = View(base, chain, aval, v, gen)


def share(t, source):
    """t reads what `source` reads (`t.data = source`, `t.set_(source)`): the same
    Base, through the same steps."""
    s = source._lazy
    if type(s) is Base:
        t._lazy = s
    else:
        t._lazy = View(s.base, s.chain, s.aval, s.current(), s.base.gen)


def aval_of(t):
    return t._lazy.aval


# -- the registries --------------------------------------------------------------------

def retire_pending(keep=None):
    """Empty `pending` (or keep the refs `keep` lists), counting what leaves."""
    n = len(pending)
    if keep is None:
        pending.clear()
    else:
        pending[:] = keep
    _retired[0] += n - len(pending)


def drop_last_pending(base):
    """Forget base's pending entry when it is the latest one (O(1); counted as retired)."""
    if pending and pending[-1]() is base:
        pending.pop()
        _retired[0] += 1


def pending_total():
    """How many values became pending since the process started."""
    return _retired[0] + len(pending)


def take_pending():
    """Empty `pending` for a full barrier; -> (the live Bases whose value is
    pending, each once at its latest entry, in entry order; the number of
    entries; the number of distinct live Bases among them).

    A Base listed twice (made, then written again) takes the place of its
    latest write: a step that writes the same tensors in the same order keys
    the same graph, whether or not a tensor was first made in an earlier step."""
    refs = pending[:]
    retire_pending()
    out, seen = _latest_live(refs)
    return out, len(refs), seen


def live_pending():
    """The live Bases whose value is pending, each once at its latest entry, in
    order of those entries."""
    return _latest_live(pending)[0]


def _latest_live(refs):
    """(the live pending Bases of `refs`, each at its latest entry, in entry order;
    how many distinct live Bases the refs name)."""
    out = []
    seen = set()
    for r in reversed(refs):
        b = r()
        if b is None or id(b) in seen:
            continue
        seen.add(id(b))
        if b.value[0].kind == _OP:
            out.append(b)
    out.reverse()
    return out, len(seen)


def compact():
    """Loops that only read values (.item()) never reach a full barrier: drop the
    entries of what died or was computed since it was recorded."""
    if len(pending) > 8192:
        retire_pending([r for r in pending if (b := r()) is not None and b.value[0].kind == _OP])
    if len(pending_views) > 8192:
        pending_views[:] = [r for r in pending_views if (v := r()) is not None and v.value[0].kind == _OP]


def take_pending_views():
    """The registered views, the registry emptied."""
    refs = pending_views[:]
    pending_views.clear()
    return refs
