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
fallback: its result would be baked in as a constant), when an argument is
a view (writes through views need the lazy path) or a CPU tensor (Dynamo passes
Python floats so) (writes through views need the lazy path).

Random ops: each takes a seed from the device generator as a scalar leaf.
The capture records which scalar leaves hold the seeds it took, and a replay
takes as many fresh seeds and feeds them in their place, so dropout draws new
masks every step exactly as the lazy path does.
"""
import collections
import time

import numpy as np
import torch

from ..base import events, metrics
from ..compile import cache
from ..ir import node as ir
from ..ir.graph import Graph
from ..runtime.platform import jax_device
from . import mode, tensor
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


class Step:
    """One captured graph: outputs and in-place writes of a function of tensors."""
    __slots__ = ("graph", "exe", "param_src", "n_mut", "mut_index", "out_avals", "mut_avals",
                 "scalar_vals", "seed_slots", "n_seeds", "replayable", "why", "extra")

    @classmethod
    def capture(cls, fn, args):
        """Run fn(*args) lazily; -> (step, outputs). `args`: a flat sequence
        (XLA tensors and other values); outputs: fn's flat list of results, as
        computed now (through the step's executable when it is replayable)."""
        from . import executor
        st = cls()
        tensors = [(i, _base(a)) for i, a in enumerate(args) if isinstance(a, tensor.XLATensor)]
        views = [i for i, b in tensors if b is None]
        bases = {}
        for i, b in tensors:
            if b is not None and id(b) not in bases:
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
        mutated = [i for i, v in saved.items() if _base(args[i])._v is not v]
        st.why = None
        if any(type(a) is not tensor.XLATensor and isinstance(a, torch.Tensor) for a in args):
            st.why = "an input is not on the XLA device (its value would be baked in)"
        elif views:
            st.why = "an argument is a view"
        elif executed:
            st.why = "the function executed a graph while tracing (host read or CPU fallback)"
        if st.why is not None:
            st.replayable = False
            return st, outs
        out_vals = []
        for o in outs:
            if isinstance(o, tensor.XLATensor):
                out_vals.append(o._v if o._xb is None else view_value(o))
        roots = [_base(args[i])._v for i in mutated] + out_vals
        g = Graph.capture(roots)
        by_data = {id(v[0]): i for i, v in saved.items()}
        src = []
        for p in g.params:
            i = by_data.get(id(p))
            src.append(i if i is not None else p.data)  # an index, or a constant array
        # seeds the trace took, in order
        seeds = []
        s = seed0
        while s != _random.rng.seed and len(seeds) < 1 << 16:
            seeds.append(s)
            s = _random._advance(s)
        seed_pos = {v: k for k, v in enumerate(seeds)}
        st.scalar_vals = [x.data for x in g.scalars]
        st.seed_slots = [(j, seed_pos[x.data]) for j, x in enumerate(g.scalars)
                         if type(x.data) is int and x.data in seed_pos]
        st.n_seeds = len(seeds)
        st.graph = g
        st.exe = None
        st.param_src = src
        st.n_mut = len(mutated)
        st.mut_index = mutated
        st.mut_avals = [_base(args[i])._aval for i in mutated]
        st.out_avals = [o._aval for o in outs if isinstance(o, tensor.XLATensor)]
        st.replayable = True
        # undo the trace's writes: the arguments get their values from the executable
        for i in mutated:
            b = _base(args[i])
            b._v = saved[i]
            b._gen += 1
        results = st.run(args, _seeds=seeds)
        it = iter(results)
        return st, [next(it) if isinstance(o, tensor.XLATensor) else o for o in outs]

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

    def run(self, args, _seeds=None):
        """Replay on new arguments (same avals as the capture); -> the output
        tensors (new bases). Arguments written in place get their new data."""
        from . import executor
        from .transfers import device_array
        traced = _seeds is not None   # the capture's own run: observers count its ops once
        if _seeds is None:
            _seeds = [_random._take_seed() for _ in range(self.n_seeds)]
        inputs = []
        pend = None
        for s in self.param_src:
            if type(s) is int:
                a = _base(args[s])
                if a._v[0].kind == ir.OP:
                    pend = [] if pend is None else pend
                    pend.append(a)
        if pend:
            # inputs still pending IR run first, together, as one graph
            metrics.counter("DynamoSyncInputExecuteTime")
            executor.sync(pend, reason="dynamo inputs")
        for s in self.param_src:
            if type(s) is int:
                a = _base(args[s])
                v = a._v[0]
                inputs.append(v.data if v.kind == ir.DATA and v.data is not None else device_array(a))
            else:
                inputs.append(s)
        inputs += self._pools(_seeds)
        g = self.graph
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
            metrics.metric("ExecuteTime", time.perf_counter_ns() - t0)
        if traced and events.wanted("executed"):
            events.emit("executed", graph=g, executable=exe, reason="dynamo")
        executor._in_flight[:] = outs
        for i, aval, arr in zip(self.mut_index, self.mut_avals, outs):
            t = _base(args[i])
            t._v = (ir.data_node(arr, *aval), 0)
            t._gen += 1
            t._last_data = None
        return [tensor.new_base((ir.data_node(arr, *aval), 0), aval)
                for aval, arr in zip(self.out_avals, outs[self.n_mut:])]
