"""Compile strategies: how a Graph becomes a runnable executable.

A strategy is a `Compiler` whose `compile(graph, inputs)` returns a callable
taking the graph's input arrays and returning its outputs (a jax Compiled, or
an object that behaves like one). Strategies are registered by the topology's
mode, so SPMD or any other way of compiling is one more registration:

    register_strategy(topology.MULTIPROCESS, JobCompiler)

`strategy()` gives the one for this process's mode (jax.jit by default).
"""
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
        self.scope = op_scope if config.flag("XLA_HLO_DEBUG") else None

    def context(self):
        return LoweringContext(jax_platform(), scope=self.scope)

    def compile(self, graph, inputs):  # noqa: A003
        import jax
        fn = graph.build_fn(self.context())
        jitted = jax.jit(fn, donate_argnums=graph.donated)
        if not graph.device:
            return _compile(jitted.lower(*inputs))
        # xla:<n>: inputs already live there; a graph without inputs needs the default too
        with jax.default_device(topology.device_for(graph.device)):
            return _compile(jitted.lower(*inputs))


# XLA:CPU spends most of a compile in LLVM code generation of fusion kernels, one per
# distinct shape. A loop body (scan, while) adds kernels for every stacked residual
# and dynamic slice; with XLA:CPU's newer fusion emitters off, such graphs compile
# 35-50% faster at the same run time, while loop-free graphs compile much slower, so
# the option is per graph.
_LOOP_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_loop_options_ok = [True]


def _compile(lowered):
    if _loop_options_ok[0] and jax_platform() == "cpu" and "stablehlo.while" in lowered.as_text():
        try:
            return lowered.compile(compiler_options=_LOOP_OPTIONS)
        except Exception as e:   # an XLA without the option: compile as usual from now on
            if "xla_cpu_use_fusion_emitters" not in str(e) and "compiler_options" not in str(e):
                raise
            _loop_options_ok[0] = False
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
