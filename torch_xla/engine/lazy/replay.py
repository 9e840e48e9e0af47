"""Captured steps: trace a function once lazily, replay its executable after.

`Step.capture(fn, args)` runs `fn(*args)` on XLA tensors in a lazy region,
captures the pending outputs (and the arguments it wrote in place) as one
`Graph`, and maps the graph's parameter leaves to argument positions. Later
calls with arguments of the same avals go through `Step.run(args)`: no
Python op tracing at all, just binding the arguments' current device arrays
to the graph's parameters, one call of the cached executable, new base
tensors for the outputs and new data for the arguments written in place.

A step cannot be replayed (`replayable` is False, and the caller traces
lazily every time) when the trace executed something (a host read or a CPU
fallback: its result would be baked in as a constant), when it writes into an
argument that is a view (writes through views need the lazy path), or when an
argument is a CPU tensor (Dynamo passes Python floats so). A view argument that
is only read is bound through its base, guarded by `accepts`.

Random ops: each takes a seed from the device generator as a scalar leaf.
The capture records which scalar leaves hold the seeds it took, and a replay
takes as many fresh seeds and feeds them in their place, so dropout draws new
masks every step exactly as the lazy path does.
"""
import collections
import time
import weakref

import numpy as np
import torch

from ..base import config, events, metrics
from ..compile import cache
from ..ir import node as ir
from ..ir.graph import Graph
from ..runtime.platform import jax_device
from . import donation, exec_time, mode, tensor
from .handlers import random as _random
from .views import view_value



def _executions():
    return metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")


def _base(t):
    """The base tensor holding t's value: t, or the base t aliases whole (a
    view with no steps, as parameters often are); None for a real view."""
    if t._xb is None:
        return t
    return t._xb if not t._chain else None


def _root(t):
    """The base tensor whose storage t reads (t itself for a base)."""
    return t if t._xb is None else t._xb


class Step:
    """One captured graph: outputs and in-place writes of a function of tensors."""
    __slots__ = ("graph", "exe", "param_src", "n_mut", "mut_index", "out_avals", "mut_avals",
                 "scalar_vals", "seed_slots", "n_seeds", "replayable", "why", "extra", "pools", "views",
                 "free_donated")

    @classmethod
    def capture(cls, fn, args):
        """Run fn(*args) lazily; -> (step, outputs). `args`: a flat sequence
        (XLA tensors and other values); outputs: fn's flat list of results, as
        computed now (through the step's executable when it is replayable)."""
        from . import executor
        st = cls()
        st.pools = None
        # a view argument (AOTAutograd hands the backward views of the forward's
        # outputs) is read through its base: the graph's leaf is the base's data
        # and the view's steps are ops of the graph, so a replay binds the base
        # and checks that the argument is the same view of a base of the same aval
        tensors = [(i, _root(a)) for i, a in enumerate(args) if isinstance(a, tensor.XLATensor)]
        st.views = {i: (args[i]._chain, args[i]._xb._aval) for i, b in tensors if _base(args[i]) is None}
        bases = {}
        for i, b in tensors:
            if id(b) not in bases:
                bases[id(b)] = (i, b)
        # arguments must be device data: their data nodes are the graph's inputs
        pend = [b for _, b in bases.values() if b._v[0].kind == ir.OP]
        if pend:
            metrics.counter("DynamoSyncInputExecuteTime")
            executor.sync(pend, reason="dynamo inputs")
        saved = {i: b._v for i, b in bases.values()}
        seed0 = _random.rng.seed
        n_exec = _executions()
        prev = mode.state.lazy_region
        mode.state.lazy_region = True
        try:
            outs = fn(*args)
        finally:
            mode.state.lazy_region = prev
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        outs = list(outs)
        executed = _executions() != n_exec
        mutated = [i for i, v in saved.items() if _root(args[i])._v is not v]
        st.why = None
        view_bases = {id(args[i]._xb) for i in st.views}
        if any(type(a) is not tensor.XLATensor and isinstance(a, torch.Tensor) for a in args):
            st.why = "an input is not on the XLA device (its value would be baked in)"
        elif any(id(_root(args[i])) in view_bases for i in mutated):
            st.why = "it writes into an argument that is a view"
        elif executed:
            st.why = "the function executed a graph while tracing (host read or CPU fallback)"
        if st.why is not None:
            st.replayable = False
            return st, outs
        out_vals = []
        for o in outs:
            if isinstance(o, tensor.XLATensor):
                out_vals.append(o._v if o._xb is None else view_value(o))
        roots = [_root(args[i])._v for i in mutated] + out_vals
        g = Graph.capture(roots)
        marked = donation.marked_params(g)   # explicit donors (dynamo_set_buffer_donor_)
        if marked:
            g.donate(marked)
        by_data = {id(v[0]): i for i, v in saved.items()}
        src = []
        for p in g.params:
            i = by_data.get(id(p))
            src.append(i if i is not None else p.data)  # an index, or a constant array
        seeds = st._take_scalars(g, seed0)
        st.graph = g
        st.exe = None
        st.param_src = src
        st.n_mut = len(mutated)
        st.mut_index = mutated
        st.mut_avals = [_root(args[i])._aval for i in mutated]
        # donated inputs the step does not overwrite: a replay gives the executable
        # a copy of any whose buffer is no longer a marked donor
        st.free_donated = [k for k in g.donated if type(src[k]) is int and src[k] not in mutated]
        st.out_avals = [o._aval for o in outs if isinstance(o, tensor.XLATensor)]
        st.replayable = True
        # undo the trace's writes: the arguments get their values from the executable
        for i in mutated:
            b = _root(args[i])
            b._v = saved[i]
            b._gen += 1
        results = st.run(args, _seeds=seeds)
        it = iter(results)
        return st, [next(it) if isinstance(o, tensor.XLATensor) else o for o in outs]

    def _take_scalars(self, g, seed0):
        """Record g's scalar leaves and which of them hold the seeds the trace
        took from the device generator since `seed0`; -> those seeds."""
        seeds = []
        s = seed0
        while s != _random.rng.seed and len(seeds) < 1 << 16:
            seeds.append(s)
            s = _random._advance(s)
        seed_pos = {v: k for k, v in enumerate(seeds)}
        self.scalar_vals = [x.data for x in g.scalars]
        self.seed_slots = [(j, seed_pos[x.data]) for j, x in enumerate(g.scalars)
                           if type(x.data) is int and x.data in seed_pos]
        self.n_seeds = len(seeds)
        return seeds

    def _pools(self, seeds):
        vals = self.scalar_vals
        if self.seed_slots:
            vals = list(vals)
            for j, k in self.seed_slots:
                vals[j] = seeds[k]
        by = collections.defaultdict(list)
        for x, v in zip(self.graph.scalars, vals):
            by[x.entry].append(v)
        return [np.asarray(by[p], dtype=p) for p in sorted(by)]

    def accepts(self, args):
        """Whether every argument captured as a view is the same view now (same
        steps, of a base of the same aval), so binding its base is right."""
        for i, (chain, aval) in self.views.items():
            a = args[i]
            if type(a) is not tensor.XLATensor or a._xb is None or a._chain != chain or a._xb._aval != aval:
                return False
        return True

    def _bind(self, args):
        """The executable's inputs when every argument is device data (the
        usual case); None otherwise."""
        inputs = []
        data = ir.DATA
        for s in self.param_src:
            if type(s) is int:
                a = args[s]
                if a._xb is not None:
                    if a._chain and s not in self.views:
                        return None
                    a = a._xb   # a whole alias, or a view captured as one: the graph reads the base
                v = a._v[0]
                if v.kind != data or v.data is None:
                    return None
                inputs.append(v.data)
            else:
                inputs.append(s)
        return inputs

    def _bind_slow(self, args, executor, device_array):
        pend = []
        for s in self.param_src:
            if type(s) is int:
                a = _root(args[s]) if s in self.views else _base(args[s])
                if a is not None and a._v[0].kind == ir.OP:
                    pend.append(a)
        if pend:
            # inputs still pending IR run first, together, as one graph
            metrics.counter("DynamoSyncInputExecuteTime")
            executor.sync(pend, reason="dynamo inputs")
        inputs = []
        for s in self.param_src:
            if type(s) is int:
                a = _root(args[s]) if s in self.views else _base(args[s])
                if a is None:   # a view: its current value
                    inputs.append(device_array(args[s]))
                    continue
                v = a._v[0]
                inputs.append(v.data if v.kind == ir.DATA and v.data is not None else device_array(a))
            else:
                inputs.append(s)
        return inputs

    def run(self, args, _seeds=None):
        """Replay on new arguments (same avals as the capture); -> the output
        tensors (new bases). Arguments written in place get their new data."""
        from . import executor
        from .transfers import device_array
        traced = _seeds is not None   # the capture's own run: observers count its ops once
        if self.views and not self.accepts(args):
            raise RuntimeError("torch_xla: a replayed step got a different view as an argument "
                               "than the one it was captured with (check Step.accepts first)")
        if _seeds is None:
            _seeds = [_random._take_seed() for _ in range(self.n_seeds)]
        inputs = self._bind(args)
        if inputs is None:
            inputs = self._bind_slow(args, executor, device_array)
        if self.n_seeds:
            inputs += self._pools(_seeds)
        else:   # no random op: the scalar pools never change
            if self.pools is None:
                self.pools = self._pools(_seeds)
            inputs += self.pools
        g = self.graph
        kept = ()
        if self.free_donated:
            # an input the executable donates but whose buffer is no longer a marked
            # donor (the step was captured with a mark, Dynamo does not guard it):
            # donate a copy, so the tensor keeps its value and nothing recompiles
            kept = [k for k in self.free_donated
                    if not donation.is_marked(_root(args[self.param_src[k]])._v[0])]
            for k in kept:
                inputs[k] = inputs[k].copy()
        with cache.lock:
            exe = self.exe
            if exe is None:
                exe = cache.lookup(g.key)
                if exe is None:
                    jax_device()
                    metrics.counter("UncachedCompile")
                    if events.wanted("compile_begin"):
                        events.emit("compile_begin", graph=g, reason="dynamo")
                    exe = cache.compile_graph(g, inputs)
                    if events.wanted("compiled"):
                        events.emit("compiled", graph=g, executable=exe, reason="dynamo")
                self.exe = exe
            t0 = time.perf_counter_ns()
            outs = exe.compiled(*inputs)
            exec_time.launched("ExecuteTime", t0, outs)
        if events.wanted("executed") and (traced or config.read("XLA_SAVE_TENSORS_FILE")):   # replays are dumped
            events.emit("executed", graph=g, executable=exe, reason="dynamo")
        for k in g.donated:   # those buffers now belong to the outputs
            s = self.param_src[k]
            if type(s) is int and k not in kept:
                node = _root(args[s])._v[0]
                if node.kind == ir.DATA:
                    donation.consumed(node)
        executor._in_flight[:] = outs
        for i, aval, arr in zip(self.mut_index, self.mut_avals, outs):
            t = _root(args[i])
            t._v = (ir.data_node(arr, *aval), 0)
            t._gen += 1
            t._last_data = None
        return [tensor.new_base((ir.data_node(arr, *aval), 0), aval)
                for aval, arr in zip(self.out_avals, outs[self.n_mut:])]


# -- torch_xla.compile(fn, replay=True): a call that may touch tensors it closes over --

class CallStep:
    """One captured call of a compiled function. Unlike `Step`, the function
    may read and write tensors it does not take as arguments (a model's
    parameters, the optimizer's state, gradients it replaces): they are found
    by their data leaves at capture and held weakly. `replay` runs the call's
    executable on the current arguments and those tensors."""
    __slots__ = ("step", "arg_pos", "holders", "holder_avals", "news_out", "grad_slots",
                 "out_spec", "out_fixed", "n_out", "replayable", "why", "fingerprint")

    def replay(self, leaves):
        """-> the call's result, or None when a tensor it closes over is gone or
        changed shape (the caller traces again)."""
        combined = [leaves[i] for i in self.arg_pos]
        for a in combined:
            if type(a) is not tensor.XLATensor or (a._xb is not None and a._chain):
                return None   # a view or a CPU tensor now: the capture assumed a base
        for r, aval in zip(self.holders, self.holder_avals):
            t = r()
            if t is None or t._xb is not None or t._aval != aval:
                return None
            combined.append(t)
        news = self.step.run(combined)
        for p, k in self.grad_slots:
            p.grad = None if k is None else news[k]
        return self._result(news)

    def _result(self, news):
        from torch.utils._pytree import tree_unflatten
        flat = [None] * self.n_out
        for k, v in self.out_fixed.items():
            flat[k] = v
        for k, j in self.news_out:
            flat[k] = news[j]
        return tree_unflatten(flat, self.out_spec)


def _live_tensors():
    """Every live XLA tensor (one walk of the collector's objects: capture only)."""
    import gc
    xt = tensor.XLATensor
    return [o for o in gc.get_objects() if type(o) is xt]


def capture_call(fn, args, kwargs, after_trace=None):
    """Run fn(*args, **kwargs) lazily (inside torch_xla.compile's region) and
    capture it; -> (CallStep, result). The result is computed through the
    step's executable when the step is replayable; otherwise it is left
    pending for the caller's sync. `after_trace()` runs once fn has returned,
    with its graph still pending (torch_xla.compile's graph-count limit)."""
    from torch.utils._pytree import tree_flatten
    leaves = tree_flatten((args, kwargs))[0]
    cs = CallStep()
    cs.replayable = False
    cs.why = None
    olds = {}     # id(base) -> (base, value before the call)
    by_data = {}  # id(data node) -> base holding it
    grads = []    # (leaf tensor that wants a gradient, its .grad before the call)
    for t in _live_tensors():
        if t.requires_grad and t.grad_fn is None:
            grads.append((t, t.grad))   # parameters are often whole-tensor views of a base
        if t._xb is None:
            olds[id(t)] = (t, t._v)
            if t._v[0].kind == ir.DATA:
                by_data.setdefault(id(t._v[0]), t)
    seed0 = _random.rng.seed
    n_exec = _executions()
    out = fn(*args, **kwargs)
    if after_trace is not None:
        after_trace()
    out_leaves, cs.out_spec = tree_flatten(out)
    cs.n_out = len(out_leaves)
    why = None
    if _executions() != n_exec:
        why = "the function executed a graph while tracing (a host read, a CPU fallback or a mark_step)"
    arg_pos = {}
    for i, a in enumerate(leaves):
        if isinstance(a, torch.Tensor):
            if type(a) is not tensor.XLATensor:
                why = why or "an argument is not on the XLA device"
            elif _base(a) is None:
                why = why or "an argument is a view"
            else:
                arg_pos.setdefault(id(_base(a)), i)
    news, new_ids, news_out, fixed, with_history = [], {}, [], {}, []
    for k, o in enumerate(out_leaves):
        if not isinstance(o, torch.Tensor):
            fixed[k] = o
        elif type(o) is not tensor.XLATensor or o._xb is not None or id(o) in olds:
            why = why or "it returns a view, a CPU tensor or a tensor that existed before the call"
        else:
            if o.requires_grad:
                with_history.append(o)
            if id(o) not in new_ids:
                new_ids[id(o)] = len(news)
                news.append(o)
            news_out.append((k, new_ids[id(o)]))
    grad_slots, grad_bases = [], set()
    for p, g0 in grads:
        g1 = p.grad
        if g1 is g0:
            continue
        if g1 is None:
            grad_slots.append((p, None))
        elif type(g1) is tensor.XLATensor and id(g1) not in olds and (g1._xb is None or id(g1._xb) not in olds):
            # a new gradient (often a view of a new base, e.g. mm's transposed output):
            # a replay computes its value and assigns a new base tensor holding it
            if g1._xb is not None:
                grad_bases.add(id(g1._xb))
            if id(g1) not in new_ids:
                new_ids[id(g1)] = len(news)
                news.append(g1)
            grad_slots.append((p, new_ids[id(g1)]))
        else:
            why = why or "it sets a gradient to a tensor that existed before the call"
    # in the order of their first write (the collector's order changes between
    # calls; the graph's key depends on its roots' order)
    changed = {id(t): t for t, v in olds.values() if t._v is not v}
    mutated = []
    for r in tensor.pending:
        t = r()
        if t is not None and changed.pop(id(t), None) is not None:
            mutated.append(t)
    mutated += changed.values()   # written without becoming pending (`.data = ` another tensor)
    old_grads = {id(g0) for _, g0 in grads if g0 is not None}
    if with_history and not grad_slots and not any(id(t) in old_grads for t in mutated):
        # no backward ran inside: the caller may still differentiate the result
        why = why or "it returns a tensor with autograd history and runs no backward"
    for r in tensor.pending:
        t = r()
        if (t is not None and t._xb is None and t._v[0].kind == ir.OP
                and id(t) not in olds and id(t) not in new_ids and id(t) not in grad_bases):
            why = why or (f"it leaves a new tensor {list(t.shape)} alive that it neither returns nor "
                          "assigns as a gradient (state made on a first call, or a saved autograd value)")
    if why is not None:
        cs.why = why
        return cs, out
    roots = [t._v for t in mutated] + [t._v if t._xb is None else view_value(t) for t in news]
    g = Graph.capture(roots)
    holders, hpos = [], {}

    def position(t):
        i = arg_pos.get(id(t))
        if i is not None:
            return ("a", i)
        if id(t) not in hpos:
            hpos[id(t)] = len(holders)
            holders.append(t)
        return ("h", hpos[id(t)])

    src = []
    for p in g.params:
        t = by_data.get(id(p))
        if t is None:
            cs.why = "the function uploads host data (a tensor made from Python values inside it)"
            return cs, out
        src.append(position(t))
    mut = [position(t) for t in mutated]
    # combined inputs of a replay: the argument tensors, then the held tensors
    arg_list = sorted({i for k, i in src + mut if k == "a"})
    apos = {i: n for n, i in enumerate(arg_list)}

    def index(pos):
        return apos[pos[1]] if pos[0] == "a" else len(arg_list) + pos[1]

    st = Step()
    st.pools = None
    st.views = {}
    st.free_donated = ()
    seeds = st._take_scalars(g, seed0)
    st.graph = g
    st.exe = None
    st.param_src = [index(x) for x in src]
    st.n_mut = len(mutated)
    st.mut_index = [index(x) for x in mut]
    st.mut_avals = [t._aval for t in mutated]
    st.out_avals = [(tuple(t.shape), t.dtype) if t._xb is not None else t._aval for t in news]
    st.replayable = True
    st.why = None
    st.extra = None
    cs.step = st
    cs.arg_pos = arg_list
    cs.holders = [weakref.ref(t) for t in holders]
    cs.holder_avals = [t._aval for t in holders]
    cs.news_out = news_out
    cs.grad_slots = grad_slots
    cs.out_fixed = fixed
    cs.replayable = True
    seed_set = {j for j, _ in st.seed_slots}
    cs.fingerprint = (g.key, tuple(v for j, v in enumerate(st.scalar_vals) if j not in seed_set),
                      tuple(arg_list), tuple(id(t) for t in holders),
                      tuple((id(p), k) for p, k in grad_slots), tuple(news_out), cs.out_spec,
                      tuple(sorted((k, repr(v)) for k, v in fixed.items())))
    # undo the trace's writes and run the executable: the values come from it
    saved = {id(t): olds[id(t)][1] for t in mutated}
    for t in mutated:
        t._v = saved[id(t)]
        t._gen += 1
    combined = [leaves[i] for i in arg_list] + holders
    results = st.run(combined, _seeds=seeds)
    for t, r in zip(news, results):
        if t._xb is None:
            t._v = r._v
            t._gen += 1
    for p, k in grad_slots:
        if k is not None and news[k]._xb is not None:
            p.grad = results[k]
    return cs, out
