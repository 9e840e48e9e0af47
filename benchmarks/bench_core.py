"""Core benchmark: tracing cost, per-step tracing, cached training-step time and
compile time, side by side.

Competitors in one run (this machine is noisy; the ratios are what count):
  * torch_xla (this project): lazy tracing + cached XLA executable
  * pure JAX: the same model as jax.jit(jax.value_and_grad(...)) + SGD momentum
  * eager PyTorch on the CPU
  * upstream torch_xla 2.9, when UPSTREAM_PYTHON names a Python that has it: its
    numbers come from subprocesses running benchmarks/_upstream_worker.py, which
    calls the very functions of this file (same step function, same batch sizes,
    same number of steps) under upstream's torch_xla.

Models (SGD momentum, lr 0.01, momentum 0.9, for every competitor):
  * MLP 4x512, batch 256            _models.torch_mlp / jax_mlp
  * MNIST CNN, batch 64             _models.torch_mnist / jax_mnist
  * GPT 2x128, seq 64, batch 8      _models.torch_gpt(blocks="explicit") / the
    loss of _models.jax_gpt with SGD momentum (jax_gpt's own step is AdamW, so
    the JAX step is built here from its loss: the same decoder, batch-first
    blocks, tied head, token cross-entropy)

Sections:
  [tracing]            3,000-op scalar chain, graph cached: Python time per traced op;
                       beside it torch's own cost on the same chain: eager CPU, and a
                       wrapper subclass whose __torch_dispatch__ only makes its output
                       (the least a Python tracer can pay per op on this torch).
  [per-step tracing]   one training step's Python time, from its first op to the
                       return of xm.mark_step() (the graph is dispatched, not waited
                       for); before each measured step the previous step's execution
                       was waited for, so no device time is in it. Median of R steps.
                       Beside it, the ops one step hands to torch_xla's dispatcher
                       (counted as the chain's ops are: every aten call reaching
                       XLATensor.__torch_dispatch__, counted in one extra, untimed step),
                       the step's time per op, and its ratio to the chain's per-op cost.
  [cached step]        steady state: N steps back to back, one wait at the end,
                       best of 3 such runs.
  [compiled step]      the same models under torch.compile(model, backend="openxla"),
                       a plain SGD momentum (not compiled) and xm.mark_step() each
                       step: the cached step (as [cached step]) and its ratio to pure
                       JAX, and the executables run and compiled per step in steady
                       state (deltas of the ExecuteTime sample count and the
                       CompileTime count over the timed steps); upstream's in the same
                       run when UPSTREAM_PYTHON is set.
  [compile]            time from a new graph to its first result. Each model and
                       each side runs in a FRESH subprocess: in one process, the
                       earlier sections would already have compiled the models' graphs
                       and the small graphs they share (optimizer updates, zero
                       fills), and warmed JAX's per-primitive lowering, so the numbers
                       would be contaminated. Each subprocess first runs an unrelated
                       tiny graph (so the runtime's one-time start-up is not counted),
                       then times the first training step (trace + compile + execute +
                       wait) and the second (a new graph again for torch: the SGD
                       momentum buffers exist from then on), then the steady step.
                       No persistent cache on either side: ours runs without
                       XLA_PERSISTENT_CACHE_PATH / JAX_COMPILATION_CACHE_DIR (removed
                       from its environment, and checked), upstream never calls
                       xr.initialize_cache. "compile" = first + second - 2 x steady
                       (for pure JAX, also measured in its own fresh process as a
                       reference, the second step is already cached). The
                       CompileTime column is each torch_xla's own metric.
  [index checks]       deferred in-graph index checks on vs off (ours only).
  [memory]             RSS over many cached MLP steps (not with --quick; once, after
                       the runs).

Usage:
    [UPSTREAM_PYTHON=/path/to/python] python benchmarks/bench_core.py [--steps N] [--runs N] [--quick]
        [--json PATH] [--plot PATH.png]

--json PATH writes every run's numbers, their median, the date, the machine, the
command line and the git commit (docs/data/bench_core.json feeds the
documentation's benchmark page); --plot PATH.png draws the cached step of each
competitor per model (matplotlib, imported only then).

--runs N repeats every timed section N times (each run's tables are printed) and
then prints the per-value median over the runs (ratios are of those medians).
--quick (the test's mode): 8 steps in one timed run per competitor, per-step
tracing over 5 steps, 4 index-check blocks, no RSS run. The eager CPU competitor
runs with torch's default thread count; on a loaded machine its OpenMP threads
suffer most, so read its column with the load average in the header.
"""
import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time

import numpy as np  # noqa: F401  (the models need it; fail early if missing)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _models import jax_mlp, jax_mnist, jax_resnet18, torch_gpt, torch_mlp, torch_mnist, torch_resnet18  # noqa: E402
from _report import metadata, pyplot, write_json  # noqa: E402
from _timing import run_json  # noqa: E402

MODELS = (("mlp", 256, "MLP 4x512, batch 256"),
          ("mnist", 64, "MNIST CNN, batch 64"),
          ("gpt", 8, "GPT 2x128, seq 64, batch 8"))
NAMES = {k: name for k, _, name in MODELS}

TARGET_TRACE_US = 6.0        # tracing, us/op on the scalar chain
TARGET_STEP_TRACE = 0.75     # per-step tracing, ours / upstream
TARGET_STEP_JAX = 1.05       # cached step, ours / pure JAX
TARGET_STEP_PER_OP = 2.0     # per-step tracing per dispatched op, over the chain's per op

# the environment variables that would turn on a persistent compilation cache
CACHE_VARS = ("XLA_PERSISTENT_CACHE_PATH", "XLA_PERSISTENT_CACHE_READ_ONLY", "JAX_COMPILATION_CACHE_DIR")


def timeit(step, n, warmup=3, sync=lambda: None, reps=3):
    """Steady-state time per step: n steps back to back, one sync at the end
    (a training loop never waits between steps), best of `reps` runs."""
    for _ in range(warmup):
        step()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def alternate(named, steps, reps=3, pick=min):
    """Steady-state time per step of several (step, sync) pairs, as timeit, their
    timed runs taken in turn (A B A B ...) so that the machine's load drifts
    alike for all: {name: pick (best, or e.g. statistics.median) of its runs'
    seconds per step}."""
    for step, sync in named.values():
        for _ in range(3):
            step()
        sync()
    runs = {name: [] for name in named}
    for _ in range(reps):
        for name, (step, sync) in named.items():
            runs[name].append(timeit(step, steps, warmup=1, sync=sync, reps=1))
    return {name: pick(v) for name, v in runs.items()}


def step_tracing(step, sync, reps):
    """Python time of one step (its ops traced and its graph dispatched by
    mark_step, not waited for), the previous step's execution waited for
    before each: median seconds."""
    step()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times)


def _chain(y, n_ops):
    for _ in range(n_ops // 2):
        y = y * 1.0001
        y = y + 0.5
    return y


def bench_tracing(n_ops=3000, reps=10):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    dev = torch_xla.device()
    x = torch.randn(16, device=dev)
    for _ in range(3):
        _chain(x, n_ops)
        xm.mark_step()
    trace, total = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        _chain(x, n_ops)
        t1 = time.perf_counter()
        xm.mark_step()
        xm.wait_device_ops()
        t2 = time.perf_counter()
        trace.append((t1 - t0) / n_ops)
        total.append((t2 - t0) / n_ops)
    return statistics.median(trace) * 1e6, statistics.median(total) * 1e6


def bench_dispatch_floor(n_ops=3000, reps=10):
    """What torch itself costs per op on the same chain, us/op (median):
    eager CPU tensors, and the least a Python __torch_dispatch__ tracer can do
    on this torch -- a wrapper subclass on the xla device whose handler only
    makes the output tensor (shape, dtype and device precomputed; nothing
    recorded). The target of the [tracing] section is measured against it."""
    import torch
    import torch_xla
    dev, shape, dtype = torch_xla.device(), (16,), torch.float32
    make = torch.Tensor._make_wrapper_subclass

    class Floor(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return make(Floor, shape, dtype=dtype, device=dev)

    out = []
    for x in (torch.randn(shape), make(Floor, shape, dtype=dtype, device=dev)):
        _chain(x, n_ops)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _chain(x, n_ops)
            times.append((time.perf_counter() - t0) / n_ops)
        out.append(statistics.median(times) * 1e6)
    return tuple(out)


def _tiny(resnet):
    """The CI-sized ResNet-18 of bench_resnet --quick: 1/8 of the channels, 32x32 images."""
    return lambda batch: resnet(batch, size=32, width=0.125)


def _torch_step(kind, batch, on_xla, gpt_blocks="explicit"):
    """One SGD-momentum training step of the PyTorch model, eager CPU or XLA
    (then ending in xm.mark_step()). Runs under upstream torch_xla too."""
    import torch
    if kind == "gpt":
        model, data, target, loss_fn = torch_gpt(batch, blocks=gpt_blocks)
    else:
        model, data, target, loss_fn = {"mlp": torch_mlp, "mnist": torch_mnist, "resnet18": torch_resnet18,
                                        "resnet_tiny": _tiny(torch_resnet18)}[kind](batch)
    barrier = lambda: None  # noqa: E731
    if on_xla:
        import torch_xla
        import torch_xla.core.xla_model as xm
        dev = torch_xla.device()
        model, data, target, barrier = model.to(dev), data.to(dev), target.to(dev), xm.mark_step
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(data), target).backward()
        opt.step()
        barrier()
    return step


def _jax_step(kind, batch):
    """The pure-JAX SGD-momentum step of the same model: (step(), sync())."""
    import jax
    from _models import _sgd_momentum, jax_gpt
    if kind == "gpt":
        # jax_gpt's own step is AdamW: take its loss and state, train with SGD momentum
        _, (params, _m, _v, _t, idx, tgt), loss_fn = jax_gpt(batch, with_loss=True)
        step_fn = _sgd_momentum(loss_fn)
        state = (params, jax.tree_util.tree_map(lambda a: a * 0, params), idx, tgt)
    else:
        step_fn, state = {"mlp": jax_mlp, "mnist": jax_mnist, "resnet18": jax_resnet18,
                          "resnet_tiny": _tiny(jax_resnet18)}[kind](batch)
    holder = {"s": state}

    def step():
        holder["s"] = step_fn(*holder["s"])

    def sync():
        jax.block_until_ready(holder["s"])
    return step, sync


def bench_model_xla(kind, batch, steps, trace_reps, reps=3, jax=None):
    """torch_xla (ours, or upstream in the worker): cached step and per-step tracing
    (and, for ours, the ops one step hands to the tracer). jax: pure JAX's
    (step, sync), timed in turn with the cached step ("jax" in the result)."""
    import torch_xla.core.xla_model as xm
    step = _torch_step(kind, batch, True)
    named = {"step": (step, xm.wait_device_ops), **({"jax": jax} if jax else {})}
    out = alternate(named, steps, reps)
    out["trace"] = step_tracing(step, xm.wait_device_ops, trace_reps)
    out["ops"] = count_dispatched_ops(step, xm.wait_device_ops)
    return out


def count_dispatched_ops(step, sync):
    """How many aten calls of one step reach this project's Python dispatcher
    (XLATensor.__torch_dispatch__), counted as the [tracing] chain's ops are
    counted: each call torch hands to the tracer is one op, whatever it does
    there (a lowered op, a view, a detach autograd asks for, one _foreach_ call
    over a parameter list, a decomposition's entry and each aten call it makes
    in turn). The step runs once more with a counting wrapper around the
    dispatcher (not timed); None under upstream torch_xla, which has no Python
    dispatcher."""
    try:
        from torch_xla.engine.lazy.tensor import XLATensor
    except ImportError:
        return None
    attr = XLATensor.__dict__["__torch_dispatch__"]
    inner = attr.__func__
    n = [0]

    def counting(cls, func, types, args=(), kwargs=None):
        n[0] += 1
        return inner(cls, func, types, args, kwargs)

    sync()
    XLATensor.__torch_dispatch__ = classmethod(counting)
    try:
        step()
    finally:
        XLATensor.__torch_dispatch__ = attr
    sync()
    return n[0]


def xla_parts(kind, batch, compiled=False):
    """(model, data, target, loss_fn, SGD momentum optimizer) of a benchmark model on the
    XLA device; the model under torch.compile(backend="openxla") when `compiled`.
    Runs under upstream torch_xla too."""
    import torch
    import torch_xla
    if kind == "gpt":
        model, data, target, loss_fn = torch_gpt(batch, blocks="explicit")
    else:
        model, data, target, loss_fn = {"mlp": torch_mlp, "mnist": torch_mnist}[kind](batch)
    dev = torch_xla.device()
    model, data, target = model.to(dev), data.to(dev), target.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return (torch.compile(model, backend="openxla") if compiled else model), data, target, loss_fn, opt


def _compiled_step(kind, batch):
    """The training step with the model under torch.compile(backend="openxla"), a
    plain (not compiled) SGD momentum and xm.mark_step() each step. Runs under
    upstream torch_xla too."""
    import torch_xla.core.xla_model as xm
    compiled, data, target, loss_fn, opt = xla_parts(kind, batch, compiled=True)

    def step():
        opt.zero_grad()
        loss_fn(compiled(data), target).backward()
        opt.step()
        xm.mark_step()
    return step


def bench_compiled_step(kind, batch, steps, reps=3, jax=None):
    """torch.compile(backend="openxla") training: the cached step (as timeit), and
    the executables run and compiled per step in steady state: deltas of the
    ExecuteTime sample count and the CompileTime count over the timed steps.
    jax: pure JAX's (step, sync), timed in turn with it ("jax" in the result)."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    def count(name):
        data = met.metric_data(name)
        return int(data[0]) if data else 0

    compiled = _compiled_step(kind, batch)
    for _ in range(3):   # Dynamo's traces, the bridge's graphs, the momentum buffers
        compiled()
    xm.wait_device_ops()
    calls = [0]

    def step():
        calls[0] += 1
        compiled()
    ex0, co0 = count("ExecuteTime"), count("CompileTime")
    out = alternate({"step": (step, xm.wait_device_ops), **({"jax": jax} if jax else {})}, steps, reps)
    out["executed"] = (count("ExecuteTime") - ex0) / calls[0]
    out["compiled"] = (count("CompileTime") - co0) / calls[0]
    return out


def bench_eager_step(kind, batch, steps, reps=3):
    return timeit(_torch_step(kind, batch, False), steps, reps=reps)


def _warm_up_runtime():
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    x = torch.ones(8, device=torch_xla.device())
    (x * 3 + 1).sum().item()
    xm.wait_device_ops()


def compile_point(side, kind, batch, steps):
    """Meant for a fresh process: the first and second step of a new model's
    training (trace + compile + execute + wait), then its steady step. side:
    "xla" (whichever torch_xla this Python imports) or "jax"."""
    out = {}
    if side == "jax":
        import jax
        import jax.numpy as jnp
        # as in the main process, where importing torch_xla turned it on
        jax.config.update("jax_enable_x64", True)
        jax.jit(lambda x: (x * 3 + 1).sum())(jnp.ones(8, jnp.float32)).block_until_ready()
        step, sync = _jax_step(kind, batch)
        out["cache_dir"] = jax.config.jax_compilation_cache_dir
    else:
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        _warm_up_runtime()
        step, sync = _torch_step(kind, batch, True), xm.wait_device_ops
        met.clear_all()
        # this project runs on JAX: its on-disk cache would be JAX's (upstream: none asked for)
        jax = sys.modules.get("jax")
        out["cache_dir"] = jax.config.jax_compilation_cache_dir if jax else None
    t0 = time.perf_counter()
    step()
    sync()
    t1 = time.perf_counter()
    step()
    sync()
    t2 = time.perf_counter()
    out.update(first=t1 - t0, second=t2 - t1)
    if side != "jax":
        data = met.metric_data("CompileTime")
        out["graphs"], out["compile_metric"] = (int(data[0]), data[1] / 1e9) if data else (0, 0.0)
    out["steady"] = timeit(step, steps, warmup=1, sync=sync)
    return out


def eager_point(kind, batch, steps, threads=None):
    """Eager PyTorch on the CPU in this (fresh) process: first step and steady step."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    step = _torch_step(kind, batch, False)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    return {"first": first, "steady": timeit(step, steps, warmup=1), "threads": torch.get_num_threads()}


def cache_point(kind, batch, path, started, steps=2):
    """A process with the persistent compilation cache at `path` (xr.initialize_cache,
    before any computation). Its first training step (trace, compile or load,
    execute, wait; the model is built and moved to the device before), the
    steady step after it, and the time from `started` (the parent's clock just
    before it launched this process) to the first step's end."""
    import torch_xla.runtime as xr
    xr.initialize_cache(path)
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    step = _torch_step(kind, batch, True)
    xm.wait_device_ops()
    t0 = time.perf_counter()
    step()
    xm.wait_device_ops()
    first = time.perf_counter() - t0
    since_start = time.time() - started
    data = met.metric_data("CompileTime")
    out = {"first": first, "since_start": since_start,
           "compile_metric": data[1] / 1e9 if data else 0.0,
           "hits": met.counter_value("PersistentCacheHit") or 0,
           "misses": met.counter_value("PersistentCacheMiss") or 0}
    step()                       # the second step's graph (optimizer state now exists)
    xm.wait_device_ops()
    out["steady"] = timeit(step, steps, warmup=1, sync=xm.wait_device_ops, reps=1)
    return out


def versions_here():
    import jax
    import torch
    import torch_xla
    return {"torch": torch.__version__, "jax": jax.__version__, "torch_xla": torch_xla.__version__}


# ---------------------------------------------------------------- subprocesses

def _clean_env(upstream=False):
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
    if upstream:
        env.pop("PYTHONPATH", None)   # this project's torch_xla must not shadow upstream's
        env.setdefault("PJRT_DEVICE", "CPU")
    return env


def upstream_python():
    return os.environ.get("UPSTREAM_PYTHON") or None


def upstream_versions(py):
    code = ("import importlib.metadata as m, json, sys; print(json.dumps({'torch': m.version('torch'), "
            "'torch_xla': m.version('torch_xla'), 'python': sys.version.split()[0]}))")
    return run_json([py, "-c", code], _clean_env(True), 120, cwd=HERE)


def upstream(args, timeout=1800):
    py = upstream_python()
    if not py:
        return None
    res = run_json([py, os.path.join(HERE, "_upstream_worker.py"), json.dumps(args)], _clean_env(True), timeout, cwd=HERE)
    if "error" in res:
        print(f"  (upstream torch_xla run failed: {res['error']})", flush=True)
        return None
    return res


def point(args, timeout=900):
    """One measurement (worker_main's args) in a fresh process of this project's
    Python, with no persistent cache: -> its dict, or None (said why) on failure."""
    res = run_json([sys.executable, os.path.abspath(__file__), "--point", json.dumps(args)], _clean_env(),
                   timeout, cwd=HERE)
    if "error" in res:
        print(f"  ({args['mode']} point for {args['kind']} failed: {res['error']})", flush=True)
        return None
    return res


def compile_subprocess(side, kind, batch, steps):
    args = {"mode": "compile", "side": "xla" if side == "upstream" else side,
            "kind": kind, "batch": batch, "steps": steps}
    if side == "upstream":
        return upstream(args, timeout=900)
    return point(args)


def worker_main(args):
    """The measurements a subprocess makes (for upstream via _upstream_worker.py,
    or a compile point of ours / JAX): -> a JSON-able dict."""
    if args.get("mode") == "compile":
        return compile_point(args["side"], args["kind"], args["batch"], args["steps"])
    if args.get("mode") == "eager":
        return eager_point(args["kind"], args["batch"], args["steps"], args.get("threads"))
    if args.get("mode") == "cache":
        return cache_point(args["kind"], args["batch"], args["path"], args["started"])
    if args.get("mode") == "compiled":
        out = {}
        for kind, batch in args["models"]:
            try:
                out[kind] = bench_compiled_step(kind, batch, args["steps"], args.get("reps", 3))
            except Exception as e:  # noqa: BLE001 - one model's failure is reported, the others run
                out[kind] = {"error": f"{type(e).__name__}: {e}"[:300]}
        return out
    import torch
    import torch_xla
    out = {"versions": {"torch": torch.__version__, "torch_xla": torch_xla.__version__,
                        "torch_xla_path": os.path.dirname(torch_xla.__file__)}}
    out["per_op"], out["per_op_total"] = bench_tracing()
    for kind, batch in args["models"]:
        out[kind] = bench_model_xla(kind, batch, args["steps"], args["trace_reps"], args.get("reps", 3))
    return out


# ---------------------------------------------------------------- index checks, RSS

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bench_rss(steps=1000, batch=256):
    """RSS over `steps` cached MLP steps: flat means no tensor/graph/executable leak."""
    import torch_xla.core.xla_model as xm
    step = _torch_step("mlp", batch, True)
    samples = []
    for i in range(steps):
        step()
        if i % 50 == 0:
            xm.wait_device_ops()
            gc.collect()
            samples.append(rss_mb())
    return samples


def bench_index_checks(kind, batch, blocks=12, per_block=5):
    """The deferred index check's cost on one training step, measured in one
    process: blocks of steps with the checks on and off alternate (each setting
    has its own cached graph), so machine noise hits both alike. -> (on, off)
    median seconds per step."""
    import torch_xla.core.xla_model as xm
    from torch_xla.engine.base import config
    step = _torch_step(kind, batch, True, gpt_blocks="torch")
    times = {True: [], False: []}
    for flag in (True, False, True, False):   # compile and warm both graphs
        with config.override(XLA_CHECK_INDICES=flag):
            step()
            xm.wait_device_ops()
    for i in range(2 * blocks):
        flag = i % 2 == 0
        with config.override(XLA_CHECK_INDICES=flag):
            t0 = time.perf_counter()
            for _ in range(per_block):
                step()
            xm.wait_device_ops()
        times[flag].append((time.perf_counter() - t0) / per_block)
    return statistics.median(times[True]), statistics.median(times[False])


# ---------------------------------------------------------------- one run

def measure(a, steps, trace_reps, reps):
    """One run of every timed section -> a dict of numbers (None where a
    competitor did not run)."""
    models = [(k, b) for k, b, _ in MODELS]
    res = {"tracing": {}, "models": {}, "compile": {}, "index": {}}
    t_start = time.perf_counter()

    def progress(what):
        print(f"  [{time.perf_counter() - t_start:6.1f}s] {what} ...", flush=True)

    progress("tracing chain")
    res["tracing"]["ours"], res["tracing"]["ours_total"] = bench_tracing()
    res["tracing"]["eager"], res["tracing"]["floor"] = bench_dispatch_floor()
    for kind, batch in models:
        progress(f"{kind}: pure JAX, torch_xla, eager CPU")
        ours = bench_model_xla(kind, batch, steps, trace_reps, reps, jax=_jax_step(kind, batch))
        r = {"jax": ours.pop("jax"), "ours": ours}
        r["eager"] = bench_eager_step(kind, batch, steps, reps)
        res["models"][kind] = r
    if upstream_python():
        progress("upstream torch_xla: tracing chain, cached steps, per-step tracing")
        up = upstream({"mode": "main", "models": models, "steps": steps, "trace_reps": trace_reps, "reps": reps})
        res["upstream_versions"] = (up or {}).get("versions")
        res["tracing"]["up"] = up["per_op"] if up else None
        for kind, _ in models:
            res["models"][kind]["up"] = up.get(kind) if up else None
    res["compiled"] = {}
    for kind, batch in models:
        progress(f"compiled step, {kind}: torch.compile(backend='openxla')")
        try:
            res["compiled"][kind] = {"ours": bench_compiled_step(kind, batch, steps, reps, jax=_jax_step(kind, batch))}
        except Exception as e:  # noqa: BLE001 - reported in the table, the other sections still run
            res["compiled"][kind] = {"ours": {"error": f"{type(e).__name__}: {e}"[:300]}}
    if upstream_python():
        progress("upstream torch_xla: compiled steps")
        up = upstream({"mode": "compiled", "models": models, "steps": steps, "reps": reps})
        for kind, _ in models:
            res["compiled"][kind]["up"] = up.get(kind) if up else None
    progress("index checks")
    for kind, batch in (("mnist", 64), ("gpt", 8)):
        res["index"][kind] = bench_index_checks(kind, batch, blocks=4 if a.quick else 12)
    if not a.no_compile:
        sides = ["ours", "jax"] + (["upstream"] if upstream_python() else [])
        for kind, batch in models:
            progress(f"compile, {kind}: fresh processes for {', '.join(sides)}")
            res["compile"][kind] = {s: compile_subprocess("xla" if s == "ours" else s, kind, batch,
                                                          max(steps // 2, 3)) for s in sides}
    progress("done")
    return res


# ---------------------------------------------------------------- report

def _mark(ok):
    return "PASS" if ok else "MISS"


def _ms(x, width=11):
    return f"{x * 1e3:>{width}.2f}" if x is not None else f"{'-':>{width}}"


def _ratio(a, b, width=9):
    return f"{a / b:>{width}.2f}" if a is not None and b else f"{'-':>{width}}"


def report(res, title):
    print(f"\n======== {title} ========")
    tr = res["tracing"]
    up_trace = tr.get("up")
    print("\n[tracing] chain of 3,000 elementwise ops with scalar operands, graph cached")
    print(f"  torch_xla: {tr['ours']:.2f} us/op traced ({tr['ours_total']:.2f} us/op with sync + execute)   "
          f"target <= {TARGET_TRACE_US:g} us/op: {_mark(tr['ours'] <= TARGET_TRACE_US)}")
    if up_trace is not None:
        print(f"  upstream torch_xla 2.9: {up_trace:.2f} us/op traced   torch_xla/upstream "
              f"{tr['ours'] / up_trace:.2f}")
    if tr.get("floor") is not None:
        print(f"  torch alone: eager CPU {tr['eager']:.2f} us/op; a __torch_dispatch__ subclass that only "
              f"makes its output {tr['floor']:.2f} us/op (the floor of any Python tracer on this torch); "
              f"torch_xla/floor {tr['ours'] / tr['floor']:.2f}")

    rows = res["models"]
    has_up = any(r.get("up") for r in rows.values())
    print("\n[per-step tracing] one training step's Python time, first op to the return of xm.mark_step() "
          "(graph dispatched, not waited for; the previous step already waited for), median, ms")
    print(f"  {'model':<28}{'torch_xla':>11}{'upstream':>11}{'xla/upstream':>14}{'':>6}"
          f"{'ops/step':>10}{'us/op':>8}{'chain us/op':>13}{'step/chain':>12}")
    for kind, r in rows.items():
        ours, up = r["ours"]["trace"], (r.get("up") or {}).get("trace")
        verdict = f"  {_mark(ours / up <= TARGET_STEP_TRACE)}" if up else f"{'':>6}"
        ops = r["ours"].get("ops")
        per_op = ours / ops * 1e6 if ops else None
        per_op_cols = (f"{int(ops):>10d}{per_op:>8.2f}{tr['ours']:>13.2f}{per_op / tr['ours']:>12.2f}  "
                       f"{_mark(per_op / tr['ours'] <= TARGET_STEP_PER_OP)}") if ops else f"{'-':>10}"
        print(f"  {NAMES[kind]:<28}{_ms(ours)}{_ms(up)}{_ratio(ours, up, 14)}{verdict}{per_op_cols}")
    print(f"  target: torch_xla/upstream <= {TARGET_STEP_TRACE:g}" +
          ("" if has_up else "   (n/a: upstream did not run; set UPSTREAM_PYTHON)"))
    print(f"  ops/step: the aten calls of one step that reach torch_xla's Python dispatcher, counted as the "
          f"chain's are (a view, an autograd detach, a _foreach_ call over a list: one each); us/op: the step's "
          f"time over them; target: step/chain <= {TARGET_STEP_PER_OP:g}")

    print("\n[cached training step] steady state: N steps back to back, one wait, best of the timed runs "
          "(torch_xla's and pure JAX's taken in turn); ms/step (SGD momentum)")
    print(f"  {'model':<28}{'torch_xla':>11}{'pure JAX':>11}{'eager CPU':>11}{'upstream':>11}"
          f"{'xla/JAX':>9}{'':>6}{'xla/eager':>11}{'xla/upstream':>14}")
    for kind, r in rows.items():
        ours, jx, ea, up = r["ours"]["step"], r["jax"], r["eager"], (r.get("up") or {}).get("step")
        print(f"  {NAMES[kind]:<28}{_ms(ours)}{_ms(jx)}{_ms(ea)}{_ms(up)}{_ratio(ours, jx)}"
              f"  {_mark(ours / jx <= TARGET_STEP_JAX)}{_ratio(ours, ea, 11)}{_ratio(ours, up, 14)}")
    print(f"  target: torch_xla/JAX <= {TARGET_STEP_JAX:g}")

    if res.get("compiled"):
        print("\n[compiled step] torch.compile(model, backend=\"openxla\"), plain SGD momentum (not compiled), "
              "xm.mark_step() each step: steady state as [cached training step] (pure JAX timed again, in turn "
              "with it), ms/step; executables run and "
              "compiled per step (ExecuteTime samples and CompileTime count over the timed steps)")
        print(f"  {'model':<28}{'torch_xla':>11}{'pure JAX':>11}{'upstream':>11}{'xla/JAX':>9}{'xla/upstream':>14}"
              f"{'run/step':>10}{'compiled/step':>15}{'up run/step':>13}")
        for kind, c in res["compiled"].items():
            ours, up = c.get("ours") or {}, c.get("up") or {}
            if "error" in ours:
                print(f"  {NAMES[kind]:<28}failed: {ours['error']}")
                continue
            o, u, jx = ours.get("step"), up.get("step"), ours.get("jax") or rows[kind]["jax"]
            up_run = f"{up['executed']:>13.2f}" if up.get("executed") is not None else f"{'-':>13}"
            print(f"  {NAMES[kind]:<28}{_ms(o)}{_ms(jx)}{_ms(u)}{_ratio(o, jx)}{_ratio(o, u, 14)}"
                  f"{ours['executed']:>10.2f}{ours['compiled']:>15.2f}{up_run}")
            if "error" in up:
                print(f"  {'':<28}upstream failed: {up['error']}")

    if res.get("compile"):
        print("\n[compile] new graph to first result: fresh process per model and side, empty persistent "
              "cache, a tiny unrelated graph run first; 1st and 2nd training step (trace + compile + "
              "execute + wait), s; compile = 1st + 2nd - 2 x steady")
        print(f"  {'model':<28}{'side':<14}{'1st step':>10}{'2nd step':>10}{'steady ms':>11}{'compile':>10}"
              f"{'graphs':>8}{'CompileTime':>13}")
        for kind, sides in res["compile"].items():
            comp = {}
            for i, side in enumerate(("ours", "upstream", "jax")):
                if side not in sides:
                    continue
                c = sides[side]
                label = {"ours": "torch_xla", "upstream": "upstream 2.9", "jax": "pure JAX"}[side]
                name = NAMES[kind] if i == 0 else ""
                if not c:
                    print(f"  {name:<28}{label:<14}{'failed':>10}")
                    continue
                if c.get("cache_dir"):
                    print(f"  WARNING: {label} ran with a persistent compilation cache at {c['cache_dir']}")
                comp[side] = c["first"] + c["second"] - 2 * c["steady"]
                extra = (f"{int(c['graphs']):>8d}{c['compile_metric']:>12.2f}s" if "graphs" in c else "")
                print(f"  {name:<28}{label:<14}{c['first']:>9.2f}s{c['second']:>9.2f}s{c['steady'] * 1e3:>11.2f}"
                      f"{comp[side]:>9.2f}s{extra}")
            if comp.get("ours") is not None and comp.get("upstream"):
                o, u = sides["ours"], sides["upstream"]
                print(f"  {'':<28}torch_xla/upstream: compile {comp['ours'] / comp['upstream']:.2f}, "
                      f"1st step {o['first'] / u['first']:.2f}")

    if res.get("index"):
        print("\n[index checks] deferred in-graph index checks, on vs off (XLA_CHECK_INDICES), "
              "alternating blocks in one process   target <= +3%")
        for kind, (on, off) in res["index"].items():
            name = "GPT (nn.TransformerEncoder)" if kind == "gpt" else NAMES[kind]
            print(f"  {name:<28} on {on*1e3:.2f} ms, off {off*1e3:.2f} ms ({(on / off - 1) * 100:+.1f}%)  "
                  f"{_mark(on / off - 1 <= 0.03)}")


def _median_tree(xs):
    """Per-value median over runs of the same-shaped results."""
    vals = [x for x in xs if x is not None]
    if not vals:
        return None
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
        return statistics.median(vals)
    if all(isinstance(x, dict) for x in vals):
        keys = list(dict.fromkeys(k for x in vals for k in x))
        return {k: _median_tree([x.get(k) for x in vals]) for k in keys}
    if all(isinstance(x, (list, tuple)) for x in vals) and len({len(x) for x in vals}) == 1:
        return tuple(_median_tree(list(col)) for col in zip(*vals))
    return vals[0]


def header(up_versions):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    v = versions_here()
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"machine: {os.cpu_count()} cores{', ' + cpu if cpu else ''}; {platform.platform()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"this project: torch_xla {v['torch_xla']} on jax {v['jax']}, torch {v['torch']}, "
          f"python {platform.python_version()}")
    if up_versions and "error" not in up_versions:
        print(f"upstream ({upstream_python()}): torch_xla {up_versions['torch_xla']}, torch {up_versions['torch']}, "
              f"python {up_versions['python']}")
    elif upstream_python():
        print(f"upstream ({upstream_python()}): versions unknown ({(up_versions or {}).get('error')})")
    else:
        print("upstream: not run (set UPSTREAM_PYTHON to a Python with torch_xla 2.9)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30, help="steps per timed run of the cached step")
    p.add_argument("--trace-reps", type=int, default=30, help="steps measured for per-step tracing")
    p.add_argument("--runs", type=int, default=1, help="repeat the measurements; print each run and the median")
    p.add_argument("--rss-steps", type=int, default=1000)
    p.add_argument("--no-compile", action="store_true", help="skip the compile section (its subprocesses)")
    p.add_argument("--quick", action="store_true", help="few steps, no RSS run")
    p.add_argument("--json", metavar="PATH", help="write the results (and the run's metadata) as JSON")
    p.add_argument("--plot", metavar="PATH.png", help="draw the cached step per model and competitor (matplotlib)")
    p.add_argument("--point", help=argparse.SUPPRESS)   # internal: one subprocess measurement
    a = p.parse_args()
    if a.point:
        print(json.dumps(worker_main(json.loads(a.point))))
        return
    steps = 8 if a.quick else a.steps
    trace_reps = 5 if a.quick else a.trace_reps
    reps = 1 if a.quick else 3

    started = metadata()   # date, load and commit as the run starts
    up_versions = upstream_versions(upstream_python()) if upstream_python() else None
    header(up_versions)
    print(f"settings: cached step: best of {reps} timed run(s) of {steps} steps; per-step tracing: "
          f"median of {trace_reps} steps; "
          f"{a.runs} run(s){', quick' if a.quick else ''}", flush=True)

    results = []
    for i in range(a.runs):
        print(f"\nrun {i + 1} of {a.runs}:", flush=True)
        results.append(measure(a, steps, trace_reps, reps))
        uv = results[-1].get("upstream_versions")
        if uv and "+jax" in str(uv.get("torch_xla")):
            print(f"  WARNING: the upstream worker imported this project's torch_xla ({uv})")
        report(results[-1], f"run {i + 1} of {a.runs}")
    if a.runs > 1:
        report(_median_tree(results), f"median of {a.runs} runs")

    rss = None
    if not a.quick:
        samples = bench_rss(a.rss_steps)
        q = max(len(samples) // 4, 1)
        early = statistics.mean(samples[1:1 + q])   # after warm-up
        late = statistics.mean(samples[-q:])
        growth = (late - early) / early * 100
        rss = {"steps": a.rss_steps, "early_mb": early, "late_mb": late, "peak_mb": max(samples), "growth_pct": growth}
        print(f"\n[memory] RSS over {a.rss_steps} cached MLP steps (sampled every 50): after warm-up "
              f"{early:.0f} MB, last quarter {late:.0f} MB ({growth:+.1f}%), peak {max(samples):.0f} MB   "
              f"target within 5%: {_mark(abs(growth) <= 5)}")

    if a.json or a.plot:
        data = dict(
            started,
            benchmark="bench_core",
            versions={"ours": versions_here(),
                      "upstream": up_versions if up_versions and "error" not in up_versions else None},
            settings={"steps": steps, "trace_reps": trace_reps, "reps": reps, "runs": a.runs, "quick": a.quick},
            models={k: {"batch": b, "name": n} for k, b, n in MODELS},
            targets={"trace_us": TARGET_TRACE_US, "step_trace_vs_upstream": TARGET_STEP_TRACE,
                     "step_vs_jax": TARGET_STEP_JAX, "step_per_op_vs_chain": TARGET_STEP_PER_OP},
            median=_median_tree(results), runs=results, rss=rss)
        if a.json:
            write_json(a.json, data)
        if a.plot:
            plot(data, a.plot)


COMPETITORS = (("lazy", "torch_xla lazy"), ("compiled", "torch_xla torch.compile"), ("jax", "pure JAX"),
               ("upstream", "upstream torch_xla 2.9"), ("eager", "eager PyTorch CPU"))


def cached_steps(res):
    """{model: {competitor: seconds per cached step or None}} from one run's (or the median's) numbers."""
    out = {}
    for kind, r in res["models"].items():
        comp = (res.get("compiled") or {}).get(kind, {}).get("ours") or {}
        out[kind] = {"lazy": r["ours"]["step"], "compiled": comp.get("step"), "jax": r.get("jax"),
                     "upstream": (r.get("up") or {}).get("step"), "eager": r.get("eager")}
    return out


def plot(data, path):
    """A grouped bar chart: per model, the cached training step of each competitor (ms, log scale)."""
    plt = pyplot()
    steps = cached_steps(data["median"])
    kinds = list(steps)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(COMPETITORS)
    for i, (key, label) in enumerate(COMPETITORS):
        xs = [j + (i - (len(COMPETITORS) - 1) / 2) * width for j in range(len(kinds))]
        vals = [steps[k][key] * 1e3 if steps[k][key] else 0 for k in kinds]
        bars = ax.bar(xs, vals, width, label=label)
        for b, v in zip(bars, vals):
            if v:
                ax.annotate(f"{v:.2g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(kinds)), [data["models"][k]["name"] for k in kinds])
    ax.set_yscale("log")
    ax.set_ylabel("ms per training step (log scale)")
    ax.set_title(f"Cached training step, SGD momentum ({data['machine']['cores']} CPU cores, {data['date'][:10]})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
