"""Sub-graph capture: a Python function of XLA tensors as a pure JAX function.

`capture(fn, avals)` calls `fn` on placeholder tensors (data leaves of the given
avals holding no data), so every op it runs is traced into IR as usual. The IR
below its outputs splits in two:

- *internal* nodes depend on a placeholder: they are the body;
- everything else is *external*: device data, scalar leaves and pending values
  the function closed over (weights, constants, values computed once and used by
  every iteration). Each external value becomes an extra operand of the node that
  will run the body, and its tensor (when the function saw one) is kept so that
  autograd can reach it.

The body is rebuilt over fresh leaves (placeholders first, then externals), so
its `ir.Graph` key is structural: two captures of the same code at the same avals
have equal keys whatever the values. `Body.jax_fn()` is the graph's `build_fn`
as a function of (inputs list, externals list) -> outputs list.

Nothing leaks: the function's tensors die with the capture; a function that
writes a placeholder-dependent value into a tensor it closes over is refused.
"""
import gc
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..base.dtypes import JAX_TO_TORCH, to_jax
from ..ir import node as ir
from ..ir.graph import Graph
from ..ops.context import LoweringContext, ctx
from . import index_checks, mode, state
from .state import value_of
from .tensor import XLATensor, new_base
from .tracing import ValueArg


class CaptureError(RuntimeError):
    pass


def placeholder(aval):
    """A base tensor of aval (shape tuple, torch dtype) with no data: only for tracing."""
    shape, dtype = aval
    return new_base((ir.data_node(None, tuple(shape), dtype), 0), (tuple(shape), dtype))


def aval_of_value(v):
    """Torch (shape, dtype) of IR value v."""
    node, i = v
    if node.kind == ir.DATA:
        return node.entry
    if node.kind == ir.SCALAR:
        return ((), JAX_TO_TORCH[_np_dtype(node.entry)])
    return node.entry.out_avals[i]


def _np_dtype(name):
    return jnp.dtype(np.dtype(name))


def jax_spec(aval):
    return jax.ShapeDtypeStruct(tuple(aval[0]), to_jax(aval[1]))


_active = [None]


class _Recorder(TorchDispatchMode):
    """Remembers, for every IR value an op reads or makes, one tensor holding it,
    and the value each base tensor had when first seen (to catch writes into
    tensors the function closes over)."""

    def __init__(self):
        super().__init__()
        self.by_value = {}
        self.first = {}

    def _see(self, t, read):
        if _active[-1] is not self:
            return   # a nested capture's ops belong to it (and its tensors must die with it)
        if type(t) is not XLATensor:
            return
        v = value_of(t)
        self.by_value.setdefault((id(v[0]), v[1]), t)
        if id(t) not in self.first:
            # read before any op made it: a tensor from outside (or an input); views
            # too (torch.tensor(..., device=) makes an alias of a base)
            self.first[id(t)] = (t, v, read)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor):
                self._see(a, True)
        out = func(*args, **kwargs)
        for a in torch.utils._pytree.tree_leaves(out):
            if isinstance(a, torch.Tensor):
                self._see(a, False)
        return out


class Body:
    """A captured function: an ir.Graph over (inputs, externals).

    graph: the closed Graph; roles: per graph parameter, ('i', k) input k or
    ('e', k) external k; in_avals / out_avals: torch avals; ext_values: the outer
    IR values of the externals; ext_tensors: a tensor holding each (or None);
    ext_avals; checks: with a whole capture, the infos of the index checks
    the body computes as its last outputs (out_avals counts them). Equal keys
    mean the same computation."""
    __slots__ = ("graph", "roles", "in_avals", "out_avals", "ext_values", "ext_tensors",
                 "ext_avals", "key", "checks", "_digest", "__weakref__")

    def __eq__(self, other):
        return type(other) is Body and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def digest(self):
        if self._digest is None:
            self._digest = hashlib.sha256(repr(self.key).encode()).hexdigest()[:16]
        return self._digest

    def __repr__(self):
        return f"Body({self.digest()})"

    def jax_fn(self):
        """(inputs, externals) -> list of outputs, on JAX values; rules run under
        the lowering context in force when it is called."""
        roles = self.roles
        c = ctx
        inner = self.graph.build_fn(LoweringContext(c.platform, c.axis, c.size, None, mesh=c.mesh))

        def fn(inputs, externals):
            feed = [inputs[k] if r == "i" else externals[k] for r, k in roles]
            return inner(*feed)

        return fn

    def ext_operands(self):
        """The externals as operands for trace_node: their tensors where known, else bare values."""
        return [t if t is not None else ValueArg(v, a)
                for t, v, a in zip(self.ext_tensors, self.ext_values, self.ext_avals)]


def _depends(roots, ph_ids, pinned=None):
    """ids of nodes below roots that depend on a placeholder (or a pinned leaf)."""
    dep = {}
    for rv in roots:
        stack = [rv[0]]
        while stack:
            n = stack[-1]
            if id(n) in dep:
                stack.pop()
                continue
            if n.kind != ir.OP:
                dep[id(n)] = id(n) in ph_ids or (pinned is not None and pinned(n))
                stack.pop()
                continue
            todo = [v[0] for v in n.operands if id(v[0]) not in dep]
            if todo:
                stack.extend(todo)
                continue
            dep[id(n)] = any(dep[id(v[0])] for v in n.operands)
            stack.pop()
    return dep


def _depends_whole(roots, ph_ids, outside, pinned=None):
    """ids of nodes below roots that belong to a whole capture's body: every op
    node except the values tensors from outside held when fn first read them
    (those are operands, read anew at each call), plus the placeholders."""
    dep = {}
    for rv in roots:
        stack = [rv[0]]
        while stack:
            n = stack.pop()
            if id(n) in dep:
                continue
            if n.kind != ir.OP or id(n) in outside:
                dep[id(n)] = id(n) in ph_ids or (n.kind != ir.OP and pinned is not None and pinned(n))
                continue
            dep[id(n)] = True
            stack.extend(v[0] for v in n.operands if id(v[0]) not in dep)
    return dep


def _outside(rec, ph_ids):
    """(node id, index) -> the tensor from outside that held that value when fn first read it."""
    out = {}
    for t, v0, read in rec.first.values():
        if read and id(v0[0]) not in ph_ids:
            out.setdefault((id(v0[0]), v0[1]), t)
    return out


def _drop(t):
    return None


def _never(_):
    raise RuntimeError("torch_xla: backward through the inside of a captured function "
                       "(its gradient is the jax.vjp of the whole node)")


def _check_no_writes(rec, dep, ph_ids, name):
    """A tensor the function closes over must not be overwritten with body values."""
    for t, v0, outside in rec.first.values():
        if not outside or id(value_of(t)[0]) == id(v0[0]) or id(v0[0]) in ph_ids or dep.get(id(v0[0]), False):
            continue   # made inside fn, unchanged, or one of fn's inputs
        # a tensor from outside written by the body: with body values it cannot hold
        # them; with anything else the write would happen once, not per call of fn
        raise CaptureError(
            f"torch_xla: {name} writes in place into a tensor of shape {list(t.shape)} that it "
            f"closes over; return the new value instead (e.g. as part of the carry)")


def _leaked(refs, ph_ids):
    """The live Bases among `refs` whose value depends on a placeholder."""
    out = []
    for r in refs:
        b = r()
        if b is not None and _depends([b.value], ph_ids)[id(b.value[0])]:
            out.append(b)
    return out


def capture(fn, in_avals, name="body", pin=None, whole=False):
    """Trace fn(*placeholders) -> flat list of tensors; -> Body.

    pin: called after the trace, returns a predicate on leaf nodes: leaves it
    accepts stay operands, but the ops over them stay inside the body (random
    ops over seeds a caller will replace).

    whole: every op fn ran goes into the body, not only those over the inputs;
    the externals are then the values of tensors from outside (as fn first read
    them; their tensors are kept, so each call reads their current value) and
    leaves. A graph called many times (torch.compile's) needs this: a value
    computed from a closed-over tensor must not be frozen at its first call.

    in_avals: list of (shape, dtype). The function runs with autograd on, as user
    code does, so tensors it closes over keep their autograd history."""
    phs = [placeholder(a) for a in in_avals]
    ph_nodes = [p._lazy.value[0] for p in phs]
    ph_ids = {id(n): k for k, n in enumerate(ph_nodes)}
    rec = _Recorder()
    start = len(state.pending)
    checks_at = index_checks.mark()
    # the body's own autograd graph is never run (its gradient is a jax.vjp):
    # saving nothing for it keeps its tensors from outliving the trace
    _active.append(rec)
    # placeholders hold no data: the trace is lazy even in eager mode
    lazy_before, mode.state.lazy_region = mode.state.lazy_region, True
    try:
        with rec, torch.autograd.graph.saved_tensors_hooks(_drop, _never):
            outs = fn(*phs)
    except BaseException:
        index_checks.take_since(checks_at)   # flags over placeholders must not reach a barrier
        raise
    finally:
        mode.state.lazy_region = lazy_before
        _active.pop()
    outs = list(outs)
    for k in range(len(outs)):
        if not isinstance(outs[k], XLATensor):
            index_checks.take_since(checks_at)
            raise CaptureError(f"torch_xla: {name} must return XLA tensors; output {k} is "
                               f"{type(outs[k]).__name__}")
    out_values = [value_of(o) for o in outs]
    out_avals = [o._lazy.aval for o in outs]
    # index checks the body traced: a whole body computes them as extra outputs
    # (each call hands them back), else only those over outside values stay
    checks = index_checks.take_since(checks_at)
    if whole:
        out_values += [c[0] for c in checks]
        out_avals += [((), torch.bool)] * len(checks)
    elif checks:
        inner = _depends([c[0] for c in checks], ph_ids)
        kept = [c for c in checks if not inner[id(c[0][0])]]
        index_checks.add([c[0] for c in kept], [c[1] for c in kept])
    pinned = pin() if pin is not None else None
    outside = None
    if whole:
        outside = _outside(rec, ph_ids)
        dep = _depends_whole(out_values, ph_ids, {k[0] for k in outside}, pinned)
    else:
        dep = _depends(out_values, ph_ids, pinned)

    _check_no_writes(rec, dep, ph_ids, name)

    ext_index = {}
    ext_values, ext_avals, ext_tensors = [], [], []
    ext_leaves = []
    new_of = {}

    def ext_leaf(v):
        k = (id(v[0]), v[1])
        j = ext_index.get(k)
        if j is None:
            j = ext_index[k] = len(ext_values)
            aval = aval_of_value(v)
            ext_values.append(v)
            ext_avals.append(aval)
            # whole: only a tensor from outside is kept (one made inside fn would
            # be kept alive for nothing: its value is a constant of the body)
            ext_tensors.append(rec.by_value.get(k) if outside is None else outside.get(k))
            ext_leaves.append(ir.Node(ir.DATA, aval, (), hash(("ext",) + aval)))
        return (ext_leaves[j], 0)

    def rebuilt(v):
        n = v[0]
        if not dep[id(n)]:
            return ext_leaf(v)
        if n.kind != ir.OP:
            return v if id(n) in ph_ids else ext_leaf(v)   # a placeholder, or a pinned leaf
        return (new_of[id(n)], v[1])

    # rebuild internal nodes over the new leaves, operands first
    for rv in out_values:
        stack = [rv[0]]
        while stack:
            n = stack[-1]
            if id(n) in new_of or not dep[id(n)] or n.kind != ir.OP:
                stack.pop()
                continue
            todo = [v[0] for v in n.operands if dep[id(v[0])] and v[0].kind == ir.OP and id(v[0]) not in new_of]
            if todo:
                stack.extend(todo)
                continue
            ops = tuple(rebuilt(v) for v in n.operands)
            h = hash(tuple([o[0].hash + o[1] for o in ops] + [n.entry.hash]))
            new_of[id(n)] = ir.Node(ir.OP, n.entry, ops, h)
            stack.pop()
    roots = [rebuilt(v) for v in out_values]
    g = Graph.capture(roots)
    roles = []
    ext_ids = {id(leaf): j for j, leaf in enumerate(ext_leaves)}
    for p in g.params:
        if id(p) in ph_ids:
            roles.append(("i", ph_ids[id(p)]))
        else:
            roles.append(("e", ext_ids[id(p)]))
    b = Body()
    b.graph = g
    b.roles = tuple(roles)
    b.in_avals = tuple((tuple(a[0]), a[1]) for a in in_avals)
    b.out_avals = tuple(out_avals)
    b.ext_values = ext_values
    b.ext_tensors = ext_tensors
    b.ext_avals = tuple(ext_avals)
    b.checks = tuple(c[1] for c in checks) if whole else ()
    b.key = (g.key, b.roles, b.in_avals, b.ext_avals)
    b._digest = None
    # the function's own tensors are dead now; drop their pending entries
    del outs, rec, phs, outside
    leaked = _leaked(state.pending[start:], ph_ids)
    if leaked:
        # autograd's saved tensors may form cycles with their tensors: collect once
        leaked = None
        gc.collect()
        leaked = _leaked(state.pending[start:], ph_ids)
    if leaked:
        raise CaptureError(
                f"torch_xla: {name} keeps a tensor of shape {list(leaked[0].aval[0])} computed from its "
                f"inputs alive after it returns (a global, a list it appends to); return it instead")
    state.retire_pending([r for r in state.pending if r() is not None])
    return b
