"""The bridge between TorchDynamo and the lazy engine.

torch's `openxla_eval` backend (and `openxla`, which is AOTAutograd around it,
so forward and backward arrive as two FX graphs) calls
`extract_compiled_graph(graph_module, args)` with real XLA tensors at the first
call and then calls what it returns on every later call.

The first call with a new input signature (shapes, dtypes, and the values of
non-tensor inputs such as symbolic sizes under `mark_dynamic`) traces the FX
graph once, on placeholder tensors, into one pure function. Every call then
adds that function to the lazy graph as one node: no per-op tracing, inputs
written in place (buffers, optimizer state) get their new values, random ops
fresh seeds. How a call runs is `CompiledGraph`'s choice: at once, as
upstream's bridge runs every call, or as part of the step's one executable.

A graph that cannot be one node (its trace read a value on the host or ran an
op on the CPU, or an input is a CPU tensor) runs through lazy tracing on every
call, which is always correct. Graph breaks need nothing here: Dynamo runs the
code between compiled graphs as ordinary Python, i.e. lazily.
"""
import warnings

import torch

import torch_xla
from torch_xla.engine import api as _api
from torch_xla.utils.buffer_donor_context import alias_with_buffer_donor_config  # noqa: F401  (upstream exports it here)

from . import config  # noqa: F401

_metrics = _api.metrics


def _signature(args):
    """What a captured graph is keyed by besides Dynamo's own guards (which
    already pin each tensor's dtype and device): tensor shapes (a dynamic
    dimension may change) and the values of other inputs (symbolic sizes)."""
    sig = []
    tensor = torch.Tensor
    for a in args:
        if isinstance(a, tensor):
            sig.append(a.shape)
        else:
            sig.append((type(a), a if isinstance(a, (int, float, bool)) else id(a)))
    return tuple(sig)


def _flatten(out):
    if isinstance(out, (list, tuple)):
        return list(out), type(out)
    return [out], None


class NoneRemover:
    """Takes the Nones out of a graph's outputs and puts them back (upstream's
    helper, kept for scripts that use it). `remove_nones` edits a list in
    place (and returns it) or returns a new tuple; `none_poslist` holds the
    positions the Nones had; `add_nones` restores them the same way."""

    def __init__(self):
        self.none_poslist = []

    def remove_nones(self, values):
        self.none_poslist = [i for i, v in enumerate(values) if v is None]
        kept = [v for v in values if v is not None]
        if isinstance(values, list):
            values[:] = kept
            return values
        return tuple(kept)

    def add_nones(self, values):
        out = list(values)
        for i in self.none_poslist:
            out.insert(i, None)
        if isinstance(values, list):
            values[:] = out
            return values
        return tuple(out)


class GraphInputMatcher:
    """Lines up a cached graph's inputs for a later call (upstream's helper for
    `torch_xla._XLAC._run_cached_graph`): inputs that were the traced function's
    arguments come from the call's arguments, every other input (weights,
    constants) is the value seen at trace time.

    tensor_id_to_arg_idx: tensor id -> argument position; graph_input_tensor_ids /
    graph_input_xla_values: what `_get_tensors_xla_device_data_node` returned;
    xla_args_tensor_id: the ids of the traced arguments (not kept)."""

    def __init__(self, tensor_id_to_arg_idx, graph_input_tensor_ids, graph_input_xla_values,
                 xla_args_tensor_id):
        self.tensor_id_to_arg_idx = tensor_id_to_arg_idx
        self.graph_input_tensor_ids = graph_input_tensor_ids
        self.graph_input_xla_values = [None if tid in xla_args_tensor_id else v
                                       for tid, v in zip(graph_input_tensor_ids, graph_input_xla_values)]
        self.seed_info_id = torch_xla._XLAC._get_seed_info_id()
        self.arg_idxs = [tensor_id_to_arg_idx.get(tid) for tid in graph_input_tensor_ids]

    def __call__(self, args):
        real = []
        for kept, idx in zip(self.graph_input_xla_values, self.arg_idxs):
            if idx is None:
                if kept is None:
                    raise RuntimeError("torch_xla: a graph input that is not an argument has no traced value")
                real.append(kept)
            else:
                real.append(args[idx])
        return real


def _refuse_pending_inputs(args):
    """config.skip_input_data_check: a replay takes its inputs as they are, so an
    input still pending IR is an error (upstream's message)."""
    for a in args:
        if isinstance(a, torch.Tensor) and _api.is_xla_tensor(a) and _api.has_pending_ir(a):
            raise RuntimeError("input data to dynamo graph can not be a pending ir "
                               f"(a tensor of shape {tuple(a.shape)}; config.skip_input_data_check is set)")


class _Lazy:
    """A graph that is not one node: it runs through lazy tracing on every call."""
    __slots__ = ("why",)

    def __init__(self, why):
        self.why = why


def _executions():
    return (_metrics.counter_value("UncachedCompile") or 0) + (_metrics.counter_value("CachedCompile") or 0)


class CompiledGraph:
    """The callable torch's backend runs.

    Each call adds the graph's node (one per input signature, traced at the
    first call). The calls run at once (their inputs and outputs are computed,
    as upstream's bridge runs each call) until the full barrier ending a step
    runs pending work that reads what the step's calls returned (or wrote): the
    graphs called in that step are then part of a longer step (forward,
    backward, the optimizer reading the gradients, then xm.mark_step()), and
    from then on their calls only add their node, so the code around them (the
    optimizer, code between graph breaks, AOTAutograd's write-backs) joins the
    same graph and the step is one executable. A barrier running unrelated
    work changes nothing. In that mode, a call with no barrier since the last
    one starts a new step: the pending one runs first."""

    def __init__(self, graph_module):
        self.module = graph_module
        self.steps = {}
        self.step = -1   # the full barrier count at the last call
        self.eager = True   # each call runs at once until the graph is seen inside a longer step

    def __call__(self, *args):
        sig = _signature(args)
        entry = self.steps.get(sig)
        known = entry is not None
        if not known:
            entry = self.steps[sig] = self._capture(args)
        if type(entry) is _Lazy:
            _metrics.counter("DynamoLazyGraph")
            return self.module(*args)
        handle, positions, layout, kind = entry
        if known and config.skip_input_data_check:
            _refuse_pending_inputs(args)   # upstream checks the calls after the first
        n_all, _ = _api.full_barriers()
        if self.eager and self.step >= 0 and n_all > self.step and _api.barrier_read_watched(self.step + 1):
            # the barrier that ended the step of the last call ran pending work
            # reading outputs of that step's calls (the optimizer reading the
            # gradients a backward graph returned): this graph is part of a
            # longer step (a training step), which it joins from now on
            self.eager = False
        if not self.eager and self.step == n_all:
            # called again with no barrier since: a new step begins, and the
            # pending one runs now (a loop with no xm.mark_step() would
            # otherwise grow one graph over all its steps)
            _api.sync(reason="a compiled graph called again before a barrier")
        _metrics.counter("DynamoGraphNode")
        tensors = [args[i] for i in positions]
        if self.eager:
            pending = [t for t in tensors if _api.has_pending_ir(t)]
            if pending:
                # as upstream's bridge: inputs that are still IR run first, on their own
                _metrics.counter("DynamoSyncInputExecuteTime")
                _api.sync(pending, reason="dynamo inputs")
        before = [_api.value_node(t) for t in tensors] if self.eager else None
        outs = _api.call_graph(handle, tensors)
        if self.eager or _api.config.read("XLA_SAVE_TENSORS_FILE"):
            # a call on its own runs at once, as upstream's bridge runs each call
            # (and, dumping graphs, each call is its own "[dynamo]" record): its
            # inputs and outputs are computed, other pending tensors stay pending
            _api.sync(list(outs) + tensors, reason="dynamo", donate_marked=True)
        self.step, _ = _api.full_barriers()
        if self.eager:
            # its outputs (and the inputs it wrote) are watched until the next
            # barrier: a barrier graph reading one makes this step's graphs join
            written = [t for t, node in zip(tensors, before) if _api.value_node(t) is not node]
            _api.watch_outputs(list(outs) + written)
        return self._rebuild(layout, kind, outs)

    def _capture(self, args):
        _metrics.counter("DynamoTracedGraph")
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if any(not is_xla_tensor(args[i]) for i in positions):
            return self._lazy("an input is not on the XLA device (its value would be baked in)")
        out_info = {}

        def flat_fn(*phs):
            full = list(args)
            for i, p in zip(positions, phs):
                full[i] = p
            flat, kind = _flatten(self.module(*full))
            out_info["kind"] = kind
            out_info["layout"] = (len(flat), [(i, o) for i, o in enumerate(flat) if not isinstance(o, torch.Tensor)])
            return [o for o in flat if isinstance(o, torch.Tensor)]

        n_exec = _executions()
        try:
            handle = _api.capture_graph(flat_fn, [_api.aval_of(args[i]) for i in positions], "a dynamo graph")
        except _api.capture_errors() as e:
            return self._lazy(f"{type(e).__name__}: {e}")
        if _executions() != n_exec:
            # a graph ran while tracing (a host read or a CPU fallback over values
            # from outside): its result would be frozen into the node
            return self._lazy("it executed a graph while tracing (host read or CPU fallback)")
        return handle, positions, out_info["layout"], out_info["kind"]

    @staticmethod
    def _lazy(why):
        if _api.config.read("PT_XLA_DEBUG_LEVEL") >= 1:
            print(f"pt-xla-profiler: dynamo graph runs lazily on every call: {why}")
        return _Lazy(why)

    @staticmethod
    def _pack(flat, kind):
        if kind is None:
            return flat[0]
        return kind(flat) if kind in (list, tuple) else list(flat)

    def _rebuild(self, layout, kind, outs):
        n, nontensor = layout
        if not nontensor:
            return self._pack(outs, kind)
        flat = [None] * n
        fixed = dict(nontensor)
        it = iter(outs)
        for i in range(n):
            flat[i] = fixed[i] if i in fixed else next(it)
        return self._pack(flat, kind)


_breaks_seen = [0]


def _note_graph_breaks():
    """Count (and with PT_XLA_DEBUG_LEVEL >= 1 print, with the user's line) the
    graph breaks Dynamo recorded since the last compiled graph. The code of a
    break runs as ordinary Python, i.e. through lazy tracing."""
    from torch._dynamo.utils import graph_break_reasons as reasons
    if len(reasons) < _breaks_seen[0]:   # torch._dynamo.reset() cleared them
        _breaks_seen[0] = 0
    new = reasons[_breaks_seen[0]:]
    _breaks_seen[0] = len(reasons)
    if not new:
        return
    _metrics.counter("DynamoGraphBreak", len(new))
    if _api.config.read("PT_XLA_DEBUG_LEVEL") < 1:
        return
    for r in new:
        frame = r.user_stack[-1] if r.user_stack else None
        where = f"{frame.filename}:{frame.lineno}" if frame is not None else "an unknown line"
        text = " ".join(str(r.reason).split())
        print(f"pt-xla-profiler: TorchDynamo graph break at {where}: {text[:300]}; "
              "the code there runs through lazy tracing between the compiled graphs")


def extract_compiled_graph(xla_model, xla_args):
    """What torch's openxla backends call: -> a callable running the FX graph
    `xla_model` on XLA tensors (the first call is `xla_args`)."""
    _metrics.counter("DynamoExtractCompiledGraph")
    _note_graph_breaks()
    _api.dynamo_ready()
    for a in xla_args:
        if isinstance(a, torch.Tensor) and a.device.type != "xla":
            warnings.warn(
                f"torch_xla dynamo bridge: found a tensor of shape {tuple(a.shape)} on {a.device}; "
                "move every input and the model to torch_xla.device() before torch.compile "
                "(this graph runs lazily on every call)")
    return CompiledGraph(xla_model)


def is_xla_tensor(t):
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


def _fallback_counts(counters):
    return {n: v for n, v in counters.items() if v and n.startswith("aten::")}


def _all_on_xla(value):
    if isinstance(value, torch.Tensor):
        return is_xla_tensor(value)
    if isinstance(value, (list, tuple)):
        return all(_all_on_xla(v) for v in value)
    return True


class UnsupportedNodesCollector(torch.fx.Interpreter):
    """Runs an FX graph on XLA tensors and collects the nodes that cannot stay
    in an XLA graph (`get_unsupported_nodes()`): those that ran an op on the CPU
    fallback, or whose arguments or results are not all XLA tensors. The
    process's counters are left as they were, fallback counts included."""

    def __init__(self, module):
        super().__init__(module)
        self._unsupported_nodes = []

    def run_node(self, n):
        saved = _metrics.snapshot_counters()
        result = super().run_node(n)
        fell_back = _fallback_counts(_metrics.snapshot_counters()) != _fallback_counts(saved)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        inputs_ok = all(_all_on_xla(v) for v in list(args) + list(kwargs.values()))
        if fell_back or not (_all_on_xla(result) and inputs_ok):
            self._unsupported_nodes.append(n)
        _metrics.restore_counters(saved)   # what running the node counted is not the user's
        return result

    def get_unsupported_nodes(self):
        return self._unsupported_nodes


__all__ = ["extract_compiled_graph", "CompiledGraph", "NoneRemover", "UnsupportedNodesCollector",
           "is_xla_tensor"]
_ = torch_xla
