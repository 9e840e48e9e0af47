"""Aliasing: views of a base and mutation through either.

A view is its base plus a chain of view steps (the OpEntry of each aten view
op at its input's aval, and which output it took). Reading a view re-applies
the chain to the base's current value when the base changed since the view's
value was cached. Writing a view scatters the new value back through the
chain into a new base value, so the base and every other view see it.
"""
import jax
import jax.numpy as jnp
import numpy as np

from . import ir, tensor
from .tracing import OpInfo, ValueArg, apply_entry, trace_node


def _apply_step(step, v, aval):
    entry, idx = step
    h = hash((v[0].hash + v[1], entry.hash))
    node = ir.Node(ir.OP, entry, (v,), h)
    return (node, idx), entry.out_avals[idx]


def view_value(t):
    base = t._xb
    if not t._chain:
        return base._v
    if t._vgen == base._gen:
        return t._v
    v, aval = base._v, base._aval
    for step in t._chain:
        v, aval = _apply_step(step, v, aval)
    t._v = v
    t._vgen = base._gen
    return v


def make_view_handler(info, multi):
    """Handler for an aten view op (transpose, select, view, split, ...)."""
    def handler(args, kwargs):
        src = args[0]
        node, entry = trace_node(info, args, kwargs)
        if src._xb is None:
            base, chain, gen = src, (), src._gen
        else:
            base, chain, gen = src._xb, src._chain, src._xb._gen
        if entry.out_struct is None:
            return tensor.new_view(base, chain + ((entry, 0),), entry.out_avals[0], (node, 0), gen)
        typ, struct = entry.out_struct
        return typ(tensor.new_view(base, chain + ((entry, i),), entry.out_avals[i], (node, i), gen)
                   for i in range(len(entry.out_avals)))
    return handler


def alias(t):
    """detach/alias: a new tensor object on the same storage."""
    if t._xb is None:
        base, chain, gen = t, (), t._gen
    else:
        base, chain, gen = t._xb, t._chain, t._xb._gen
    v = t._v if t._xb is None else view_value(t)
    return tensor.new_view(base, chain, t._aval, v, gen)


# ---------------------------------------------------------------------------
# mutation

def _scatter_meta(parent, new, *, step):
    return parent.new_empty(parent.shape)


def _scatter_lowering(parent, new, *, step):
    entry, idx = step

    def view_of(p):
        return apply_entry(entry, [p])[idx]

    new = new.astype(parent.dtype)
    if jnp.issubdtype(parent.dtype, jnp.inexact):
        out, vjp = jax.vjp(view_of, parent)
        placed = vjp(new)[0]
        mask = vjp(jnp.ones(out.shape, out.dtype))[0]
        return jnp.where(mask != 0, placed, parent)
    # integer/bool: push element positions through the view, then scatter
    pos = np.arange(int(np.prod(parent.shape)), dtype=np.int64).reshape(parent.shape)
    pos_view = view_of(jnp.asarray(pos))
    flat = parent.reshape(-1).at[pos_view.reshape(-1)].set(new.reshape(-1))
    return flat.reshape(parent.shape)


_SCATTER = OpInfo("view_scatter", None, _scatter_lowering, meta=_scatter_meta)


def assign(t, v, aval=None):
    """Make v the new value of tensor t (a base or a view). v has t's aval."""
    base = t._xb
    if base is None:
        old = t._v
        t._v = v
        t._gen += 1
        if old[0].kind == ir.DATA:
            t._last_data = old[0]
            if v[0].kind == ir.OP:
                tensor.pending.append(tensor._ref(t))
        return
    # through the chain: parents[i] is the input of chain step i
    parents = []
    pv, paval = base._v, base._aval
    for step in t._chain:
        parents.append((pv, paval))
        pv, paval = _apply_step(step, pv, paval)
    cur, caval = v, t._aval
    for step, (pv, paval) in zip(reversed(t._chain), reversed(parents)):
        node, _ = trace_node(_SCATTER, (ValueArg(pv, paval), ValueArg(cur, caval)), {"step": step})
        cur, caval = (node, 0), paval
    assign(base, cur)
    t._v = v
    t._vgen = base._gen
