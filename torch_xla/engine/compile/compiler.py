"""Compile strategies: how a Graph becomes a runnable executable.

A strategy is a `Compiler` whose `compile(graph, inputs)` returns a callable
taking the graph's input arrays and returning its outputs (a jax Compiled, or
an object that behaves like one). Strategies are registered by the topology's
mode, so SPMD or any other way of compiling is one more registration:

    register_strategy(topology.MULTIPROCESS, JobCompiler)

`strategy()` gives the one for this process's mode (jax.jit by default).
"""
import math

from ..base import config
from ..ir.graph import op_scope
from ..ops.context import LoweringContext
from ..runtime import topology
from ..runtime.platform import jax_platform


class Compiler:
    """Compiles a captured graph for the given input arrays."""

    def compile(self, graph, inputs):  # noqa: A003
        raise NotImplementedError


class LocalJit(Compiler):
    """One process, one device: jax.jit of the graph's replay function.
    Donated parameters (graph.donated) become donate_argnums."""

    def __init__(self):
        # XLA_HLO_DEBUG: each op under a named scope 'aten::op(file:line)' in HLO metadata
        self.scope = op_scope if config.read("XLA_HLO_DEBUG") else None

    def context(self):
        return LoweringContext(jax_platform(), scope=self.scope)

    def compile(self, graph, inputs):  # noqa: A003
        import jax
        fn = graph.build_fn(self.context())
        jitted = jax.jit(fn, donate_argnums=graph.donated)
        if not graph.device:
            return _compile(jitted.lower(*inputs), graph)
        # xla:<n>: inputs already live there; a graph without inputs needs the default too
        with jax.default_device(topology.device_for(graph.device)):
            return _compile(jitted.lower(*inputs), graph)


# XLA:CPU options chosen per graph, each rule (predicate(graph, hlo_text), options):
# - XLA:CPU spends most of a compile in LLVM code generation of fusion kernels, one per
#   distinct shape. A loop body (scan, while) adds kernels for every stacked residual
#   and dynamic slice; with XLA:CPU's newer fusion emitters off, such graphs compile
#   35-50% faster at the same run time, while loop-free graphs compile much slower.
# - A graph whose every value is small (a host read's comparison, an optimizer's scalar
#   bookkeeping, a test's few-element tensors) runs in microseconds however its kernels
#   are made, and LLVM's optimisation is a third of its compile: such graphs are
#   compiled at backend optimisation level 0 and with the fusion emitters off too (30
#   graphs of upstream's test_python_ops: 4.4 s of compile at level 0, 2.65 s with both).
# - With the fusion emitters off, XLA:CPU emits a fused loop by recursing once per fused
#   op, on compile threads whose stacks are a fixed 8 MiB: a chain of ~5,800 elementwise
#   ops (a loop that never calls mark_step) overflowed it and killed the process. No
#   rule applies to a graph deeper than _MAX_DEPTH ops (_compile checks it once); XLA's
#   own emitters compile those (a 9,000-op chain: 8 s). Training steps are far
#   shallower (MNIST CNN 27, the benchmarks' GPT 159).
_SMALL_VALUE = 1 << 12   # elements
_MAX_DEPTH = 500         # ops on the longest path; a few HLO levels each at most


def _shallow(graph):
    """Whether no path through the graph holds more than _MAX_DEPTH ops."""
    depth = {}
    for n in graph.order:
        d = 1
        for v in n.operands:
            r = depth.get(id(v[0]), 0)
            if r >= d:
                d = r + 1
        if d > _MAX_DEPTH:
            return False
        depth[id(n)] = d
    return True


def _loops(graph, text):
    return "stablehlo.while" in text


def _all_values_small(graph, text):
    for n in graph.order:
        for shape, _ in n.entry.out_avals:
            if math.prod(shape) > _SMALL_VALUE:
                return False
    for p in graph.params:
        if math.prod(p.entry[0]) > _SMALL_VALUE:
            return False
    return True


CPU_OPTION_RULES = [
    (_loops, {"xla_cpu_use_fusion_emitters": False}),
    (_all_values_small, {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}),
]
_options_ok = [True]

# Eager rounds every op's float16 / bfloat16 result; XLA by default lets a fused
# computation keep such intermediates in float32 (xla_allow_excess_precision):
# bf16 `v.addcmul_(v, v); (v - 0.75) ** 2` came out 0.849853515625, between two
# bf16 values. Graphs holding half-precision values compile with it off, on
# every platform; graphs without any are left alone (the option could only
# change how their compile goes).
PRECISION_OPTIONS = {"xla_allow_excess_precision": False}
_HALF = frozenset(("float16", "bfloat16"))


def _half_values(graph):
    for n in graph.order:
        for _, dt in n.entry.out_avals:
            if str(dt).replace("torch.", "") in _HALF:
                return True
    for p in graph.params:
        if str(p.entry[1]).replace("torch.", "") in _HALF:
            return True
    return False


def _compile(lowered, graph, text=None, cpu_rules=True):
    """text: lowered.as_text(), where the caller already has it. cpu_rules: apply
    CPU_OPTION_RULES on the CPU (the precision options apply everywhere)."""
    if not _options_ok[0]:
        return lowered.compile()
    options = dict(PRECISION_OPTIONS) if _half_values(graph) else {}
    if cpu_rules and jax_platform() == "cpu":
        text = text or lowered.as_text()
        rules = {}
        for applies, opts in CPU_OPTION_RULES:
            if applies(graph, text):
                rules.update(opts)
        if rules and _shallow(graph):   # one depth walk, and only where a rule applies
            options.update(rules)
    if not options:
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=options)
    except Exception as e:   # an XLA without these options: compile as usual from now on
        if not any(k in str(e) for k in options) and "compiler_options" not in str(e):
            raise
        _options_ok[0] = False
    return lowered.compile()


_STRATEGIES = {topology.SINGLE: LocalJit}
_instances = {}


def register_strategy(mode, cls):
    """Compile graphs with cls() when the topology's mode is `mode`."""
    _STRATEGIES[mode] = cls
    _instances.pop(mode, None)


def strategy():
    """The compile strategy of this process's mode (falls back to LocalJit)."""
    mode = topology.mode()
    c = _instances.get(mode)
    if c is None:
        c = _instances[mode] = _STRATEGIES.get(mode, LocalJit)()
    return c
