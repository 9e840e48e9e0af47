"""PyTorch/XLA on JAX: the torch_xla user API over JAX's XLA compiler and PJRT runtime.

`torch_xla.device()` is the lazy `xla` device: ops on it are recorded into a
graph, which is compiled once by XLA (cached by hash) and run at a barrier
(`torch_xla.sync()`, `xm.mark_step()`, a host read).
"""
import contextlib
import functools
import weakref

import torch

from .version import __version__
from .engine import api as _api

_api.start()

from . import _XLAC  # noqa: E402,F401
from .utils import dlpack as _dlpack  # noqa: E402

_dlpack.install()
from . import experimental  # noqa: E402,F401  (upstream: torch_xla.experimental is an attribute)


def _register_while_loop_hop():
    # torch._higher_order_ops.while_loop on XLA tensors (it compiles through Dynamo, so
    # Dynamo is imported by then): the HOP's rule for our tensors lives in fori_loop
    import importlib
    importlib.import_module("torch_xla.experimental.fori_loop")


_api.on_dynamo_import(_register_while_loop_hop)


def _fused_sdpa_on_gpu():
    # on a GPU, F.scaled_dot_product_attention takes cuDNN's fused kernel where it fits
    try:
        on_gpu = _api.device_type() == "CUDA"   # PJRT_DEVICE=GPU reads as CUDA
    except RuntimeError:   # an unknown PJRT_DEVICE is reported when the device starts
        on_gpu = False
    if on_gpu:
        from .experimental.custom_kernel import enable_fused_sdpa
        enable_fused_sdpa()


_fused_sdpa_on_gpu()


def device(index=None):
    """An XLA device of this process. With no index, the default one (`xla:0`
    unless an earlier call named another); `index` picks one of `devices()` and
    makes it the default, as upstream does. A process started by a launcher, or
    in SPMD mode, has only `xla:0`."""
    if index is None:
        return torch.device("xla", _api.default_device_index())
    _api.check_device_index(torch.device("xla", index))
    _api.set_default_device(index)
    return torch.device("xla", index)


def devices():
    """The XLA devices this process can address: `xla:0`..`xla:N-1` for a process
    alone on its host (N local devices, e.g. CPU_NUM_DEVICES), else [xla:0]."""
    return [torch.device("xla", i) for i in range(device_count())]


def device_count():
    """How many XLA devices this process can address."""
    return _api.addressable_device_count()


def real_devices():
    """The runtime names of this process's devices, e.g. ['CPU:0']."""
    from . import runtime as xr
    n = device_count()
    if n > 1:
        return [f"{xr.device_type()}:{i}" for i in range(n)]
    return [f"{xr.device_type()}:{xr.global_ordinal()}"]


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    """Run `fn(global_ordinal, *args)` on every device: one process per device.

    Under torchrun (or any launcher that sets RANK/WORLD_SIZE) this process is
    already one replica, and fn runs here. debug_single_process runs one replica
    in this process."""
    from .distributed import xla_multiprocessing as xmp
    config = _api.config
    if config.raw("TORCHELASTIC_RUN_ID") is not None or (config.is_set("RANK") and config.is_set("WORLD_SIZE")):
        from . import runtime as xr
        _api.distributed.maybe_initialize()
        fn(xr.global_ordinal(), *args)
        return None
    xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None, start_method=start_method)
    return None


def manual_seed(seed, device=None):
    """Seed the XLA device's random generator."""
    _api.manual_seed(seed)


def sync(wait=False, reset_scope=True):
    """Compile and run every pending op, then launch the step closures.

    With wait=True, block until the device has finished."""
    from .core import xla_model as xm
    xm.mark_step(wait=wait, reset_scope=reset_scope)


@contextlib.contextmanager
def step():
    """Context manager for one training step: syncs on entry (work pending from
    before is not folded into the step's graph) and on exit, as upstream."""
    sync()
    try:
        yield
    finally:
        sync()


def compile(f=None, full_graph=False, name=None, max_different_graphs=None,  # noqa: A001
            custom_compile_options=None, *, num_different_graphs_allowed=None, replay=False):
    """Trace `f` lazily and sync once when it returns, so one call is one graph.

    Works as a decorator, `torch_xla.compile(fn)`, or as a context manager,
    `with torch_xla.compile(): ...`. `full_graph=True`: any execution inside is
    an error. `num_different_graphs_allowed` (upstream 2.9 also spells it
    `max_different_graphs`): at most that many different graphs per compiled
    function; one more raises a RuntimeError naming the first op that differs.
    `custom_compile_options` (XLA flag overrides) are not supported: NotImplementedError.

    `replay=True` (this package only, decorator form): once two traced calls
    with the same argument signature (tensor shapes and dtypes, values of
    other arguments) captured the same graph, later calls skip Python: they
    bind the arguments and the tensors `f` closes over (parameters, optimizer
    state, gradients it replaces), run the cached executable and write the
    results back. The contract: `f`'s tensor work depends only on its
    arguments and on tensors; Python values it reads (a learning rate in a
    param group, a step counter) are frozen at capture, so pass changing
    values as arguments. A function that reads a value on the host, uploads
    data, or leaves new tensors alive that it neither returns nor assigns as
    gradients is traced every call (PT_XLA_DEBUG_LEVEL=1 says why). Counters
    `CompiledFnReplayed` / `CompiledFnTraced`."""
    if custom_compile_options:
        set_custom_compile_options(custom_compile_options)
    limit = num_different_graphs_allowed if num_different_graphs_allowed is not None else max_different_graphs
    if name is None and f is not None:
        name = getattr(f, "__name__", None) or str(f)
    if f is None:
        if replay:   # @torch_xla.compile(replay=True): a decorator, not a context
            return functools.partial(compile, full_graph=full_graph, name=name,
                                     max_different_graphs=max_different_graphs,
                                     num_different_graphs_allowed=num_different_graphs_allowed, replay=True)
        return _CompileContext(full_graph, name, limit)
    ctx = _CompileContext(full_graph, name, limit)
    if limit is not None:
        # graphs are counted per function, however many times it is wrapped
        ctx.graphs = _graphs_of(f)
    if replay:
        wrapper = _replaying(f, ctx)
    else:
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with ctx:
                return f(*args, **kwargs)
    wrapper._xla_graphs = ctx.graphs
    return wrapper


_GRAPHS_BY_FN = weakref.WeakKeyDictionary()


def _graphs_of(f):
    try:
        return _GRAPHS_BY_FN.setdefault(f, {})
    except TypeError:   # not weak-referenceable: counted per wrapper
        return {}


def _call_signature(leaves):
    """What a captured call is keyed by; None when an argument is not hashable."""
    sig = []
    for a in leaves:
        if isinstance(a, torch.Tensor):
            sig.append((a.shape, a.dtype, a.device.type, a.requires_grad))
        else:
            try:
                hash(a)
            except TypeError:
                return None
            sig.append((type(a), a))
    return tuple(sig)


def _replaying(f, ctx, max_signatures=64, give_up_after=3, retry_every=64):
    from torch.utils._pytree import tree_flatten
    # signature -> [last captured call (None once given up), stable: the same graph twice
    # in a row, unstable captures in a row, plain calls since giving up]
    calls = {}
    counter = _api.metrics.counter

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        leaves = tree_flatten((args, kwargs))[0]
        sig = _call_signature(leaves)
        entry = calls.get(sig) if sig is not None else None
        if entry is not None and entry[1]:
            done = entry[0].replay(leaves)
            if done is not None:
                counter("CompiledFnReplayed")
                return done[0]
            del calls[sig]   # a tensor it closes over died or changed shape: trace again
            entry = None
        counter("CompiledFnTraced")
        if entry is not None and entry[0] is None and entry[3] < retry_every:
            # capturing costs a walk over every live tensor: a call that never settles
            # (a Python value that changes each call) is traced plainly, retried now and then
            entry[3] += 1
            with ctx:
                return f(*args, **kwargs)
        with ctx:
            cs, out = _api.capture_call(f, args, kwargs, after_trace=ctx.check_now)
        if sig is None:
            return out
        prev = calls.pop(sig, None)
        stable = (cs.replayable and prev is not None and prev[0] is not None and prev[0].replayable
                  and prev[0].fingerprint == cs.fingerprint)
        unstable = 0 if stable else (prev[2] + 1 if prev is not None else 1)
        if len(calls) >= max_signatures:
            calls.pop(next(iter(calls)))
        if unstable > give_up_after:
            # a retry captures twice before giving up again: two captures can show it settled
            calls[sig] = [None, False, give_up_after - 1, 0]
            if _api.config.read("PT_XLA_DEBUG_LEVEL") >= 1:
                print(f"pt-xla-profiler: torch_xla.compile({ctx.name}) stops capturing: {unstable} calls in a "
                      f"row did not repeat one graph ({cs.why or 'the graph or a Python value it reads changed'})")
        else:
            calls[sig] = [cs, stable, unstable, 0]
        if not cs.replayable and _api.config.read("PT_XLA_DEBUG_LEVEL") >= 1:
            print(f"pt-xla-profiler: torch_xla.compile({ctx.name}) traces every call: {cs.why}")
        return out
    return wrapper


def set_custom_compile_options(options):
    """Upstream: XLA compiler option overrides for later compilations. Not supported:
    graphs are compiled through jax.jit with JAX's own options."""
    raise NotImplementedError(
        "torch_xla.set_custom_compile_options: XLA compile option overrides are not supported by this "
        "torch_xla (compilation goes through jax.jit)")


class _CompileContext:
    def __init__(self, full_graph, name, limit=None):
        self.full_graph = full_graph
        self.name = name
        self.limit = limit
        self.graphs = {}   # graph key -> op lines, of the graphs this function made

    def __enter__(self):
        self._checked = False
        sync()
        self._saved = _api.enter_compile(self.full_graph)  # lazy inside; full_graph: no execution
        return self

    def __exit__(self, *exc):
        _api.exit_compile(self._saved)
        if exc[0] is None:
            if self.limit is not None and not self._checked:
                self._check_limit()
            sync()
        return False

    def check_now(self):
        """The graph-count check, while the call's graph is still pending (replay)."""
        if self.limit is not None:
            self._check_limit()
        self._checked = True

    def _check_limit(self):
        key, lines = _api.op_trace()
        if key in self.graphs:
            return
        if len(self.graphs) >= self.limit:
            raise RuntimeError(_different_graph_error(self.limit, lines, list(self.graphs.values()), self.name))
        self.graphs[key] = lines

    def __call__(self, f):
        return compile(f, self.full_graph, self.name, self.limit)


def _different_graph_error(limit, got, seen, name):
    """Upstream's message: the first op where the new graph leaves every graph
    seen, and what the graphs seen do there (each different next op, in the
    order they were first seen)."""
    def common(lines):
        n = 0
        while n < min(len(lines), len(got)) and lines[n] == got[n]:
            n += 1
        return n
    at = max(common(lines) for lines in seen)
    closest = [lines for lines in seen if common(lines) == at]
    best = closest[0]
    nexts = []
    for lines in closest:
        if at < len(lines) and lines[at] not in nexts:
            nexts.append(lines[at])
    msg = [f"Maximum number of different graphs allowed per function exceeded: {limit}"]
    if at == len(got) == len(best):
        msg.append(f"Got the same {len(got)} ops as a graph seen before, on inputs of other shapes or dtypes")
    elif at < len(got):
        msg.append(f"Got: {got[at]}")
    else:
        msg.append(f"Reached the end of the function at: {got[at - 1] if at else '(no ops)'}")
    if len(nexts) > 1:
        msg.append("Expected either of:")
        msg += [f"  - {line}" for line in nexts]
    elif nexts:
        msg.append(f"Expected: {nexts[0]}")
    elif at < len(got):
        msg.append("Expected the graph to end here (the ops match a graph seen before up to this point;"
                   " an input's shape or dtype changed)")
    if name:
        msg.append(f"(in torch_xla.compile'd {name})")
    return "\n".join(msg)


def __getattr__(name):
    # upstream code reaches the model module as torch_xla.xm
    if name == "xm":
        from .core import xla_model
        return xla_model
    raise AttributeError(f"module 'torch_xla' has no attribute {name!r}")


# as upstream, `import torch_xla` makes torch_xla.core.xla_model reachable as an attribute
# (mock.patch("torch_xla.core.xla_model") and `torch_xla.core.xla_model.foo` need it)
from .core import xla_model as _xla_model  # noqa: E402,F401
from ._patched_functions import _apply_patches  # noqa: E402
from ._internal import custom_kernel as _custom_ops  # noqa: E402,F401  (torch.ops.xla.dynamo_mark_sharding)

_apply_patches()
