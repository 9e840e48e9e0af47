"""A second TorchDynamo backend, `dynamo_backend(fx, args)`: AOTAutograd's
`aot_function` with the bridge as its forward (and backward) compiler.
Upstream lowers through torchax here; on this package both backends end in
the same lazy engine, so this one is the `openxla` path spelled as a function
a test can pass to torch.compile(backend=...)."""
from functorch.compile import aot_function, make_boxed_func

from . import dynamo_bridge


def _compiler(graph_module, example_args):
    compiled = []

    def run(*args):
        if not compiled:
            compiled.append(dynamo_bridge.extract_compiled_graph(graph_module, args))
        return compiled[0](*args)

    return make_boxed_func(run)


def dynamo_backend(fx, args):
    return aot_function(fx, fw_compiler=_compiler)
