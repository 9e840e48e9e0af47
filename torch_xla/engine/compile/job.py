"""Running a step graph that holds collectives across every process of the job.

`JobCompiler` is the compile strategy of a multi-process job (the topology's
MULTIPROCESS mode); graphs with a collective node are compiled here as a
`shard_map` over the 1-D mesh of every process's device (axis
`topology.MESH_AXIS`, position = global ordinal). Each process feeds its
own arrays as its shard of global arrays and gets its own shards back, so the
executor sees the same local-in, local-out callable as for a local graph.

A watchdog thread publishes how many collective graphs this process has
entered (in jax.distributed's key-value store, about once a second), and
checks that the graph it launched last finishes: after XLA_COLLECTIVE_TIMEOUT
seconds (default 1800) it names the collectives that wait and the ordinals that
never reached them, and ends the process (the launcher then ends the job).

XLA_JOB_DUMP=<prefix> appends each job program's optimized HLO to
<prefix>.<rank>.txt (compare two ranks' programs when they disagree).
"""
import atexit
import os
import sys
import threading
import time

import jax
import numpy as np

from ..base import config, events
from ..ops import collectives as _coll
from ..ops.context import LoweringContext
from ..runtime import distributed as distributed_init
from ..runtime import topology
from ..runtime.platform import jax_device, jax_platform
from . import share
from .compiler import Compiler, LocalJit, _compile, register_strategy

_shard_map = None
_sm_kw = None


def wants(graph):
    """True when this graph must run as one job-wide program (it holds a collective)."""
    ops = _coll.COLLECTIVE_OPS
    for n in graph.order:
        if n.entry.info in ops:
            return True
    return False


def _get_shard_map():
    global _shard_map, _sm_kw
    if _shard_map is None:
        import inspect
        fn = getattr(jax, "shard_map", None)
        if fn is None:
            from jax.experimental.shard_map import shard_map as fn
        params = inspect.signature(fn).parameters
        if "check_vma" in params:
            _sm_kw = {"check_vma": False}
        elif "check_rep" in params:
            _sm_kw = {"check_rep": False}
        else:
            _sm_kw = {}
        _shard_map = fn
    return _shard_map, _sm_kw


class JobExecutable:
    """Local arrays in, local arrays out; runs the step on every process."""

    def __init__(self, compiled, sharding, in_scalar, out_scalar, n, desc):
        self.compiled = compiled
        self.sharding = sharding
        self.in_scalar = in_scalar     # which inputs are 0-d (fed as (1,))
        self.out_scalar = out_scalar
        self.n = n
        self.desc = desc

    def __getattr__(self, name):  # as_text(), cost_analysis(), ... of the compiled program
        if name.startswith("_"):  # not a jax Compiled: never serialized into a persistent cache
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *inputs):
        dev = _local_device()
        sharding = self.sharding
        n = self.n
        glob = []
        for x, sc in zip(inputs, self.in_scalar):
            if isinstance(x, np.ndarray):
                x = jax.device_put(x, dev)
            if sc:
                x = x.reshape((1,))
            shape = (x.shape[0] * n,) + tuple(x.shape[1:])
            glob.append(jax.make_array_from_single_device_arrays(shape, sharding, [x]))
        _watch.entered(self.desc)
        outs = self.compiled(*glob)
        local = []
        for o, sc in zip(outs, self.out_scalar):
            a = o.addressable_data(0)
            local.append(a.reshape(()) if sc else a)
        _watch.launched(local)
        return local


def _local_device():
    return jax_device()


class JobCompiler(Compiler):
    """Multi-process jobs: a graph holding a collective compiles as
    jit(shard_map(...)) over the job's 1-D mesh; any other graph locally."""

    def __init__(self):
        self.local = LocalJit()

    def compile(self, graph, inputs):  # noqa: A003
        if not wants(graph):
            return self.local.compile(graph, inputs)
        from jax.sharding import NamedSharding, PartitionSpec as P
        m = topology.job_mesh()
        axis = topology.MESH_AXIS
        n = m.devices.size
        spec = P(axis)
        sharding = NamedSharding(m, spec)
        in_scalar = [np.ndim(x) == 0 for x in inputs]
        out_scalar = []
        fn = graph.build_fn(LoweringContext(jax_platform(), axis=axis, size=n, scope=self.local.scope))

        def body(*blocks):
            args = [b.reshape(()) if sc else b for b, sc in zip(blocks, in_scalar)]
            outs = fn(*args)
            out_scalar[:] = [np.ndim(o) == 0 for o in outs]
            return [o.reshape((1,)) if o.ndim == 0 else o for o in outs]

        shard_map, kw = _get_shard_map()
        mapped = shard_map(body, mesh=m, in_specs=tuple(spec for _ in inputs), out_specs=spec, **kw)
        jitted = jax.jit(mapped, donate_argnums=graph.donated)
        specs = []
        for x, sc in zip(inputs, in_scalar):
            shape = (1,) if sc else tuple(np.shape(x))
            specs.append(jax.ShapeDtypeStruct((shape[0] * n,) + shape[1:],
                                              np.asarray(x).dtype if isinstance(x, np.ndarray) else x.dtype,
                                              sharding=sharding))
        lowered = jitted.lower(*specs)
        text = lowered.as_text()   # the sharing key and the CPU option rules both read it
        compiled = share.compile_shared(lowered, text, lambda low: _compile(low, graph, text))
        dump = config.read("XLA_JOB_DUMP")
        if dump:
            with open(f"{dump}.{topology.rank()}.txt", "a") as f:
                f.write(compiled.as_text())
        desc = ", ".join(_coll.describe(node.entry) for node in graph.order
                         if node.entry.info in _coll.COLLECTIVE_OPS)
        return JobExecutable(compiled, sharding, in_scalar, list(out_scalar), n, desc)


register_strategy(topology.MULTIPROCESS, JobCompiler)


# ---------------------------------------------------------------------------
# the watchdog

def collective_timeout():
    return config.read("XLA_COLLECTIVE_TIMEOUT")


class _Watch:
    def __init__(self):
        self.count = 0          # collective graphs entered by this process
        self.published = -1
        self.desc = ""
        self.pending = None     # (count, desc, arrays, t0)
        self.lock = threading.Lock()
        self.thread = None

    def entered(self, desc):
        self.count += 1
        self.desc = desc
        with self.lock:  # dispatch itself may block (CPU collectives run in it)
            self.pending = (self.count, desc, None, time.monotonic())

    def launched(self, arrays):
        with self.lock:
            p = self.pending
            self.pending = (self.count, self.desc, arrays, p[3] if p is not None else time.monotonic())

    def start(self):
        if self.thread is None:
            self.stopped = threading.Event()
            self.thread = threading.Thread(target=self._loop, name="torch_xla-collective-watchdog", daemon=True)
            self.thread.start()
            # stop before interpreter teardown: a daemon thread killed inside a call
            # into the distributed client aborts the process
            atexit.register(self.close)

    def close(self):
        if self.thread is not None:
            self.stopped.set()
            self.thread.join(timeout=5)

    def _loop(self):
        client = distributed_init.client()
        me = distributed_init.rank()
        timeout = collective_timeout()
        while not self.stopped.wait(0.5):
            try:
                if client is not None and self.count != self.published:
                    c = self.count
                    _kv_overwrite(client, f"torch_xla/progress/{me}", str(c))
                    self.published = c
            except Exception:  # noqa: BLE001 - the service may be shutting down
                pass
            with self.lock:
                p = self.pending
            if p is None:
                continue
            count, desc, arrays, t0 = p
            if arrays is not None and all(_ready(a) for a in arrays):
                with self.lock:
                    if self.pending is p:
                        self.pending = None
                continue
            if time.monotonic() - t0 > timeout:
                self._report(client, me, count, desc, time.monotonic() - t0)

    def _report(self, client, me, count, desc, waited):
        late = []
        try:
            time.sleep(1.5)  # let the others publish their latest count
            entries = dict(client.key_value_dir_get("torch_xla/progress/"))
            for r in range(distributed_init.world_size()):
                v = entries.get(f"torch_xla/progress/{r}")
                if v is None:
                    for k, val in entries.items():
                        if k.endswith(f"/{r}"):
                            v = val
                got = int(v) if v is not None else 0
                if got < count:
                    late.append((r, got))
        except Exception as e:  # noqa: BLE001
            late = [("?", f"(could not read the others' progress: {e})")]
        who = ", ".join(f"{r} (at collective step {c})" for r, c in late) or "none known"
        text = (f"torch_xla: replica {me}: collective step {count} [{desc}] has waited {waited:.0f} s "
                f"(XLA_COLLECTIVE_TIMEOUT={collective_timeout():g}) for ordinals that never reached it: {who}. "
                f"Every replica must run the same graphs.\n")
        sys.stderr.write(text)
        sys.stderr.flush()
        if distributed_init.report_hook is not None:
            try:
                distributed_init.report_hook(text)
            except Exception:  # noqa: BLE001
                pass
        os._exit(3)


def _kv_overwrite(client, key, value):
    try:
        client.key_value_set(key, value, allow_overwrite=True)
    except TypeError:  # older JAX: no allow_overwrite
        try:
            client.key_value_delete(key)
        except Exception:  # noqa: BLE001
            pass
        client.key_value_set(key, value)


def _ready(a):
    try:
        return a.is_ready()
    except Exception:  # noqa: BLE001 - deleted/donated since
        return True


_watch = _Watch()


def start_watchdog():
    _watch.start()


# joining a job (runtime/distributed.py) starts the watchdog
events.subscribe("job_started", start_watchdog)
