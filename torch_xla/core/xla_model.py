"""torch_xla.core.xla_model (xm): devices, barriers, collectives and helpers."""
import io
import os
import time
import warnings

import torch

import torch_xla
from .. import runtime as xr
from ..engine import api as _api

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

XLA_LIB = None


# -- devices -----------------------------------------------------------------

def xla_device(n=None, devkind=None):
    """Deprecated alias of torch_xla.device()."""
    warnings.warn("torch_xla.core.xla_model.xla_device() is deprecated; use torch_xla.device()",
                  DeprecationWarning, stacklevel=2)
    return torch_xla.device(n)


def xla_device_hw(device):
    """The hardware kind behind an XLA device: 'CPU', 'CUDA' or 'TPU'."""
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "xla":
        raise ValueError(f"{device} is not an XLA device")
    return xr.device_type()


def get_xla_supported_devices(max_devices=None):
    """The XLA devices of this process, as strings ('xla:0', 'xla:1', ...), at most
    `max_devices` of them."""
    devs = [f"xla:{i}" for i in range(torch_xla.device_count())]
    return devs[:max_devices] if max_devices else devs


def xla_real_devices(devices=None):
    return torch_xla.real_devices()


def is_xla_tensor(tensor):
    """True for a tensor on the XLA device."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xla"


def get_ordinal(defval=0):
    """This process's global ordinal."""
    return xr.global_ordinal()


def get_local_ordinal():
    """This process's ordinal on its host."""
    return xr.local_ordinal()


def xrt_world_size(defval=1):
    """Deprecated: the world size (use torch_xla.runtime.world_size())."""
    return xr.world_size()


def is_master_ordinal(local=True):
    """True on ordinal 0 (local=True: of this host; local=False: of the job)."""
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(*args, fd=None, local=False, flush=False):
    """print() on the master ordinal only (local=True: on each host's master)."""
    import sys
    if is_master_ordinal(local=local):
        print(*args, file=fd or sys.stdout, flush=flush)


# -- barriers ----------------------------------------------------------------

def mark_step(wait=False, reset_scope=True):
    """Compile and run the pending graph, then run the step closures."""
    if reset_scope:
        _api.reset_scopes()
    _api.metrics.counter("MarkStep")
    _api.sync(None, wait=wait, reason="user mark_step")
    _api.run_step_closures()


def wait_device_ops(devices=None):
    """Block until every operation launched on the device has finished."""
    _api.wait_device_ops()


_ASYNC = []


def _async_closures():
    """The one AsyncClosureHandler of this process (made on first use)."""
    if not _ASYNC:
        from torch_xla.utils.closures import AsyncClosureHandler
        _ASYNC.append(AsyncClosureHandler())
    return _ASYNC[0]


def add_step_closure(closure, args=(), run_async=False):
    """Run `closure(*args)` after the next barrier, in the order added.

    Closures see materialised tensors; run_async closures run in order on one
    background thread after the barrier, and an exception one of them raised
    fails the next barrier that has asynchronous closures to run."""
    if run_async:
        def later(*a):
            _async_closures().run(lambda: closure(*a))
        _api.add_step_closure(later, args)
    else:
        _api.add_step_closure(closure, args)


# -- RNG ---------------------------------------------------------------------

def set_rng_state(seed, device=None):
    """Seed the device's random generator."""
    torch_xla.manual_seed(seed)


def get_rng_state(device=None):
    """The device generator's current seed."""
    return _api.rng_seed()


class fork_rng:
    """Context manager: random ops inside draw from the device generator as usual,
    and the generator is back where it was on exit."""

    def __init__(self, device=None):
        self._saved = None

    def __enter__(self):
        self._saved = _api.rng_state().seed
        return self

    def __exit__(self, *exc):
        _api.rng_state().seed = self._saved
        return False


def optimization_barrier_(tensors):
    """In place: `tensors` pass through one XLA optimization barrier (lax.optimization_barrier)."""
    _api.optimization_barrier_(tensors)


# -- memory ------------------------------------------------------------------

def get_memory_info(device=None):
    """{'bytes_used', 'bytes_limit', 'peak_bytes_used'} of the device (0 where unknown),
    plus the older 'kb_free' / 'kb_total' that Lightning's DeviceStatsMonitor still reads."""
    info = _memory_info()
    info["kb_total"] = info["bytes_limit"] // 1024
    info["kb_free"] = max(info["bytes_limit"] - info["bytes_used"], 0) // 1024
    return info


def _memory_info():
    stats = {}
    try:
        stats = _api.memory_stats()
    except Exception:  # noqa: BLE001
        stats = {}
    if not stats:
        try:
            import resource
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except Exception:  # noqa: BLE001
            rss = 0
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"bytes_used": rss, "bytes_limit": total, "peak_bytes_used": rss}
    return {"bytes_used": stats.get("bytes_in_use", 0), "bytes_limit": stats.get("bytes_limit", 0),
            "peak_bytes_used": stats.get("peak_bytes_in_use", 0)}


# -- saving ------------------------------------------------------------------

def _to_cpu_tree(data):
    if isinstance(data, torch.Tensor):
        return data.cpu() if data.device.type == "xla" else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu_tree(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        vals = [_to_cpu_tree(v) for v in data]
        return type(data)(*vals) if hasattr(data, "_fields") else type(data)(vals)
    return data


def _xla_tensors(data, out):
    if isinstance(data, torch.Tensor):
        if data.device.type == "xla":
            out.append(data)
    elif isinstance(data, dict):
        for v in data.values():
            _xla_tensors(v, out)
    elif isinstance(data, (list, tuple)):
        for v in data:
            _xla_tensors(v, out)


def _save_atomically(obj, path):
    """torch.save to `path.tmp-<pid>`, fsync, rename: a crash leaves the previous
    checkpoint whole. Temporary files of writers that died are removed first, and
    ours is removed when saving fails."""
    import glob
    for stale in glob.glob(glob.escape(path) + ".tmp-*"):
        pid = stale.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            try:
                os.remove(stale)
            except OSError:
                pass
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # never leave a half-written checkpoint
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def save(data, file_or_path, master_only=True, global_master=False):
    """torch.save of `data` with XLA tensors moved to the CPU.

    With master_only, only the master ordinal writes (global_master: of the
    job, else of each host); every ordinal waits for it."""
    should_write = not master_only or is_master_ordinal(local=not global_master)
    if xr.world_size() > 1:
        # pending values may hold collectives: every ordinal runs that graph, then only the writer reads
        tensors = []
        _xla_tensors(data, tensors)
        if tensors:
            _api.sync(tensors, reason="xm.save")
    if should_write:
        cpu_data = _to_cpu_tree(data)  # only the writer reads the tensors back
        if isinstance(file_or_path, (str, os.PathLike)):
            _save_atomically(cpu_data, os.fspath(file_or_path))
        else:
            torch.save(cpu_data, file_or_path)
    if xr.world_size() > 1:
        rendezvous("torch_xla.core.xla_model.save")


# -- collectives -------------------------------------------------------------

def _single(tensor_or_list):
    return xr.world_size() == 1


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """Reduce `inputs` (a tensor, or a list reduced in place) across replicas."""
    from ..distributed import collectives
    return collectives.all_reduce(reduce_type, inputs, scale, groups)


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True, channel_id=None,
               use_global_device_ids=None):
    """Concatenate every replica's `value` along `dim`."""
    from ..distributed import collectives
    return collectives.all_gather(value, dim, groups, output)


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None,  # noqa: A002
                   pin_layout=True, channel_id=None, use_global_device_ids=None):
    """Reduce across replicas, then keep this replica's shard along scatter_dim."""
    from ..distributed import collectives
    return collectives.reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups, output)


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None, pin_layout=True):
    """Split `value` into split_count chunks, send chunk i to replica i, concatenate what arrives."""
    from ..distributed import collectives
    return collectives.all_to_all(value, split_dimension, concat_dimension, split_count, groups)


def collective_permute(value, pairs):
    """Send `value` along (source, target) replica pairs."""
    from ..distributed import collectives
    return collectives.collective_permute(value, pairs)


def collective_broadcast(tensors, root_ordinal=0, groups=None, pin_layout=True):
    """Overwrite `tensors` in place with root_ordinal's values."""
    from ..distributed import collectives
    return collectives.collective_broadcast(tensors, root_ordinal, groups)


def send(value, channel_id):
    from ..distributed import collectives
    return collectives.send(value, channel_id)


def recv(output, channel_id):
    from ..distributed import collectives
    return collectives.recv(output, channel_id)


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Average every parameter gradient across replicas (in the graph)."""
    count = xr.world_size()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any(getattr(p, "_is_sharded", False) for p in params):
        raise RuntimeError(
            "xm.optimizer_step / xm.reduce_gradients all-reduce gradients, but this optimizer holds parameters "
            "sharded by XlaFullyShardedDataParallel, whose backward has already reduce-scattered (averaged) "
            "them: call optimizer.step() directly")
    if count > 1:
        grads = [p.grad for p in params if p.grad is not None]
        all_reduce(REDUCE_SUM, grads, scale=1.0 / count, groups=groups)


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None, pin_layout=True):  # noqa: B006
    """reduce_gradients, then `optimizer.step(**optimizer_args)`; with barrier, mark_step."""
    reduce_gradients(optimizer, groups=groups)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        mark_step()
    return loss


def broadcast_master_param(model):
    """Copy the master ordinal's parameters and buffers to every replica."""
    if xr.world_size() == 1:
        return
    tensors = [p for p in model.parameters()] + [b for b in model.buffers()]
    with torch.no_grad():
        collective_broadcast(tensors)
    mark_step()


def rendezvous(tag, payload=b"", replicas=[]):  # noqa: B006
    """Wait for every ordinal at `tag`; returns every ordinal's payload (bytes), by ordinal."""
    from ..distributed import host_exchange
    if isinstance(payload, str):
        raise TypeError(f"xm.rendezvous: `payload` must be bytes, not str (encode it: {payload[:20]!r}.encode())")
    return host_exchange.rendezvous(tag, payload, replicas)


def mesh_reduce(tag, data, reduce_fn):
    """Gather `data` from every ordinal and return reduce_fn(list of them)."""
    from ..distributed import host_exchange
    return host_exchange.mesh_reduce(tag, data, reduce_fn)


def do_on_ordinals(target, data=(), ordinals=(0,)):
    """Run `target(*data)` on the given ordinals only, then rendezvous."""
    if get_ordinal() in ordinals:
        target(*data)
    if xr.world_size() > 1:
        rendezvous("torch_xla.core.xla_model.do_on_ordinals")


# -- misc --------------------------------------------------------------------

class RateTracker:
    """Tracks a rate (e.g. samples/second), smoothed over updates."""

    def __init__(self, smooth_factor=None):
        self._smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self._start_time = time.time()
        self._partial_time = self._start_time
        self._partial_count = 0.0
        self._partial_rate = None
        self._count = 0.0

    def _update(self, now, rate):
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time = now
        self._partial_rate = rate

    def add(self, count):
        self._count += count

    def _smooth(self, current_rate):
        if self._partial_rate is None:
            return current_rate
        return (1 - self._smooth_factor) * current_rate + self._smooth_factor * self._partial_rate

    def rate(self):
        now = time.time()
        delta = now - self._partial_time
        report_rate = 0.0
        if delta > 0:
            report_rate = self._smooth(self._count / delta)
            self._update(now, report_rate)
        return report_rate

    def global_rate(self):
        delta = time.time() - self._start_time
        count = self._partial_count + self._count
        return count / delta if delta > 0 else 0.0


def get_stablehlo(tensors=None):
    return _api.stablehlo_text(tensors)


def get_stablehlo_bytecode(tensors=None):
    return _api.stablehlo_bytecode(tensors)


del io


# -- device contexts, replication and data movement (upstream's helpers) ------

import contextlib as _contextlib  # noqa: E402
import threading as _threading  # noqa: E402
from typing import TypedDict as _TypedDict  # noqa: E402

from ..utils import utils as _xu  # noqa: E402


class DeviceContext:
    """Per-device bookkeeping upstream keeps (the device string and its replica index)."""

    def __init__(self, device):
        self.device = device


_DEVICE_CONTEXTS = {}
_DEVICE_CONTEXTS_LOCK = _threading.Lock()


def _get_device_context(device=None):
    key = str(torch_xla.device() if device is None else device)
    with _DEVICE_CONTEXTS_LOCK:
        ctx = _DEVICE_CONTEXTS.get(key)
        if ctx is None:
            ctx = _DEVICE_CONTEXTS[key] = DeviceContext(key)
        return ctx


def _xla_real_device(device):
    """The runtime name ('CPU:3') behind an XLA device of this process."""
    dev = torch.device(device)
    if dev.type != "xla" or dev.index not in (None, 0):
        raise RuntimeError(f"Invalid device format: {device}")
    return torch_xla.real_devices()[0]


def xla_device_kind(device=None):
    """A vendor string naming the kind of device (JAX's device_kind, e.g. 'cpu', 'TPU v4')."""
    return str(_api.jax_device().device_kind)


def xla_replication_devices(local_devices=None):
    """The runtime names of every device taking part in replication, by ordinal."""
    local = [str(d) for d in (local_devices or get_xla_supported_devices())]
    kinds = set()
    for d in local:
        if not d.startswith("xla"):
            raise RuntimeError(f"Cannot replicate across non-XLA devices: devices={local_devices}")
        kinds.add(xla_device_hw(d))
    if len(kinds) != 1:
        raise RuntimeError(f"Cannot replicate across different device types: devices={local_devices}")
    if len(local) != len(get_xla_supported_devices()):
        raise RuntimeError(f"Cannot replicate if number of devices ({len(local)}) is different from "
                           f"{len(get_xla_supported_devices())}")
    kind = kinds.pop()
    return [f"{kind}:{i}" for i in range(xr.global_device_count())]


def set_replication(device, devices):
    """Declare the devices this process replicates over (upstream's per-thread setup).

    Here replication is the job the launcher (or torchrun) started: every process
    owns one device, and the collectives span every process. This checks that
    `device` is this process's device and records it as the current one; in a
    process no launcher started it also sets LOCAL_RANK (if unset) to the local
    ordinal, 0, which is what clients reading LOCAL_RANK after this call expect."""
    device = str(device)
    devices = [str(d) for d in (devices or [])]
    ctx = _get_device_context(device)
    if devices:
        xla_replication_devices(devices)  # validates the list
        if device not in devices:
            raise ValueError(f"set_replication: {device} is not one of {devices}")
        ctx.device_index = devices.index(device)
    else:
        ctx.device_index = 0
    if torch.device(device).type == "xla":
        torch_xla.device(torch.device(device).index)  # raises for a device this process does not own
    # Clients that set up replication and then read LOCAL_RANK (accelerate off TPU) must see this
    # process's local ordinal, not "unset"; a launcher has already set it, and then it is left alone.
    os.environ.setdefault("LOCAL_RANK", str(xr.local_ordinal()))


def unlazy(tensors):
    """Block until `tensors` are computed (benchmarking helper)."""
    _api.sync(list(tensors), wait=True, reason="xm.unlazy")


def _plain_tensor(v):
    """A tensor that is not a Parameter (XLA tensors are a torch.Tensor subclass here)."""
    return isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter)


class ToXlaTensorArena:
    """Finds the tensors select_fn picks in a nested structure, converts them all
    at once with convert_fn(list) -> list, and rebuilds the structure."""

    def __init__(self, convert_fn, select_fn):
        self._convert_fn = convert_fn
        self._select_fn = select_fn
        self._tensors = []

    def transform(self, inputs):
        found = []
        _xu.for_each_instance(inputs, self._select_fn, found.append)
        converted = iter(self._convert_fn(found) if found else [])
        return _xu.for_each_instance_rewrite(inputs, self._select_fn, lambda _: next(converted))


def check_view_sharing(obj):
    """Raise RuntimeError when two tensors in `obj` are views of the same storage
    (saving them would silently duplicate the data)."""
    seen, aliases = set(), {}

    def info(t):
        return f"{t.dtype}{list(t.size())}"

    def check(t):
        if id(t) in seen:
            return
        seen.add(id(t))
        if t.device.type == "xla":
            storage = _api.view_alias_id(t)
            alias = ("xla", storage) if storage else None
        else:
            alias = ("torch", t.untyped_storage().data_ptr())
        if alias is None:
            return
        other = aliases.get(alias)
        if other is not None:
            raise RuntimeError(f"Tensor ID {id(t)} ({info(t)}) is sharing a view with tensor ID "
                               f"{id(other)} ({info(other)})")
        aliases[alias] = t

    _xu.for_each_instance(obj, _plain_tensor, check)


def _fetch_gradients(optimizer):
    """The .grad of every parameter of the optimizer that has one."""
    return [p.grad.data for group in optimizer.param_groups for p in group["params"]
            if isinstance(p, torch.Tensor) and p.grad is not None]


def _maybe_convert_to_cpu(data, convert=True):
    """`data` with its XLA tensors computed (one barrier) and, with convert, moved to the CPU."""
    def convert_fn(tensors):
        _api.sync(tensors, wait=True, reason="xm._maybe_convert_to_cpu")
        return [t.cpu() for t in tensors] if convert else tensors
    return ToXlaTensorArena(convert_fn, lambda v: _plain_tensor(v) and is_xla_tensor(v)).transform(data)


def send_cpu_data_to_device(datas, device, input_sharding=None):
    """Move every CPU tensor in `datas` (a single tensor becomes [tensor]) to
    `device`; in SPMD, `input_sharding` (a ShardingSpec) lays out each tensor
    whose rank it fits as it arrives."""
    if _plain_tensor(datas):
        datas = [datas]

    def convert(ts):
        if _api.topology.spmd_enabled():
            # upstream: by input_sharding where the rank fits (minibatch: this host's rows,
            # checked for every tensor first), else replicated ('{replicated}')
            from torch_xla.distributed.spmd import xla_sharding as xs
            if input_sharding is not None and input_sharding.minibatch:
                for t in ts:
                    if input_sharding.can_apply(t):
                        xs._check_minibatch(t)
            return [xs._input_to_device(t, lambda c: c.to(device), input_sharding) for t in ts]
        out = [t.to(device) for t in ts]
        if input_sharding is not None:
            for x in out:
                if input_sharding.can_apply(x):
                    input_sharding.apply(x)
        return out

    return ToXlaTensorArena(convert, lambda v: _plain_tensor(v) and v.device.type == "cpu").transform(datas)


def xla_rendezvous(payload=b"", ordinals=None, tag=None):
    """Exchange `payload` (bytes) with every replica; returns each ordinal's payload."""
    if ordinals and len(ordinals) != xr.global_device_count():
        raise ValueError("Only global rendezvous is supported")
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload)}")
    torch_xla.sync()
    if xr.world_size() == 1:
        return [payload]
    return rendezvous(tag or "torch_xla.core.xla_model.xla_rendezvous", payload)


def _get_all_reduce_token():
    raise NotImplementedError(
        "xm._get_all_reduce_token: collectives here are ordered inside the step graph, "
        "there is no all-reduce token to read")


def _run_step_closures():
    """Run the pending step closures now."""
    _api.run_step_closures()
    return _get_device_context()


@_contextlib.contextmanager
def fork_rng(device=None, enabled=True):
    """Restore the device RNG state on exit from the block."""
    if not enabled:
        yield
        return
    state = get_rng_state(device)
    try:
        yield
    finally:
        set_rng_state(state, device)


class MemoryInfo(_TypedDict, total=False):
    """What get_memory_info returns."""
    bytes_used: int
    bytes_limit: int
    peak_bytes_used: int


class CoalescingBuckets:
    """Groups tensors into buckets of at most bucket_cap_mb MiB and calls
    func(bucket, out_bucket) for each full bucket (upstream's bucketized collectives)."""

    def __init__(self, func, input_list, output_list=None, bucket_cap_mb=160):
        if not isinstance(input_list, list) or any(not isinstance(v, torch.Tensor) for v in input_list):
            raise TypeError("`input_list` must be a list of torch tensors")
        if output_list is not None and (len(output_list) != len(input_list)):
            raise ValueError("`output_list` must have the length of `input_list`")
        self._func = func
        self._input = input_list
        self._output = output_list
        self._cap = bucket_cap_mb * 1024 * 1024
        self._total = 0
        self._bucket, self._out_bucket = [], []
        self._results = []

    def flush(self):
        if not self._bucket:
            return
        out = self._out_bucket if self._output is not None else None
        result = self._func(self._bucket, out)
        if isinstance(result, (list, tuple)):
            self._results.extend(result)
        elif result is not None:
            self._results.append(result)
        self._bucket, self._out_bucket, self._total = [], [], 0

    def add(self, tensor, idx):
        nbytes = tensor.numel() * tensor.element_size()
        if self._bucket and self._total + nbytes > self._cap:
            self.flush()
        self._bucket.append(tensor)
        if self._output is not None:
            self._out_bucket.append(self._output[idx])
        self._total += nbytes

    def __call__(self):
        for idx, tensor in enumerate(self._input):
            self.add(tensor, idx)
        self.flush()
        return self._output if self._output is not None else self._results

    def get_input_list(self):
        return self._input


def all_gather_bucketized(input_list, dim=0, groups=None, output=None, pin_layout=False, bucket_cap_mb=0):
    """all_gather of each tensor of input_list (one graph node each; bucket_cap_mb is accepted
    for compatibility: the collectives are fused in the step graph anyway)."""
    results = [all_gather(t, dim=dim, groups=groups) for t in input_list]
    if output is not None:
        for o, r in zip(output, results):
            o.copy_(r)
        return output
    return results


def reduce_scatter_bucketized(reduce_type, input_list, scale, scatter_dim, shard_count, groups=None,
                              output=None, pin_layout=False, bucket_cap_mb=0):
    """reduce_scatter of each tensor of input_list (see all_gather_bucketized)."""
    results = [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups=groups)
               for t in input_list]
    if output is not None:
        for o, r in zip(output, results):
            o.copy_(r)
        return output
    return results


def all_reduce_bucketized_gradients(gradients, scale, groups, pin_layout, bucket_cap_mb=0):
    """Sum `gradients` in place across replicas and multiply by scale."""
    if gradients:
        all_reduce(REDUCE_SUM, list(gradients), scale=scale, groups=groups)


def _all_gather_using_all_reduce(value, dim=0, groups=None, pin_layout=True):
    """all_gather written as an all_reduce of zero-padded slots (upstream's fallback path)."""
    n = xr.world_size() if not groups else len(groups[0])
    if n == 1:
        return value
    if dim < 0:
        dim += value.dim()
    ordinal = get_ordinal()
    if groups:
        ordinal = next(g.index(ordinal) for g in groups if ordinal in g)
    shape = list(value.shape)
    shape[dim] *= n
    padded = torch.zeros(shape, dtype=value.dtype, device=value.device)
    padded.narrow(dim, ordinal * value.shape[dim], value.shape[dim]).copy_(value)
    return all_reduce(REDUCE_SUM, padded, groups=groups)
