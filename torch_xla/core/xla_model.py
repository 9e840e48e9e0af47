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


def get_xla_supported_devices(devkind=None, max_devices=None):
    """The XLA devices of this process, as strings ('xla:0')."""
    return ["xla:0"]


def xla_real_devices(devices=None):
    return torch_xla.real_devices()


def is_xla_tensor(tensor):
    """True for a tensor on the XLA device."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xla"


def get_ordinal(defval=0):
    """This process's global ordinal."""
    return xr.global_ordinal()


def get_local_ordinal(defval=0):
    """This process's ordinal on its host."""
    return xr.local_ordinal()


def xrt_world_size(defval=1):
    """Deprecated: the world size (use torch_xla.runtime.world_size())."""
    return xr.world_size()


def is_master_ordinal(local=True):
    """True on ordinal 0 (local=True: of this host; local=False: of the job)."""
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(*args, fd=None, **kwargs):
    """print() on the global master ordinal only."""
    import sys
    if is_master_ordinal(local=False):
        print(*args, file=fd or sys.stdout, **kwargs)


# -- barriers ----------------------------------------------------------------

def mark_step(wait=False, reset_scope=True):
    """Compile and run the pending graph, then run the step closures."""
    _api.metrics.counter("MarkStep")
    _api.sync(None, wait=wait, reason="user mark_step")
    _api.run_step_closures()


def wait_device_ops(devices=None):
    """Block until every operation launched on the device has finished."""
    _api.wait_device_ops()


def add_step_closure(closure, args=(), run_async=False):
    """Run closure(*args) after the next barrier, in the order added.

    Closures see materialised tensors; run_async closures run on a background
    thread after the barrier."""
    if run_async:
        import threading

        def later(*a):
            threading.Thread(target=closure, args=a, daemon=True).start()
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
    """{'bytes_used', 'bytes_limit', 'peak_bytes_used'} of the device (0 where unknown)."""
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
            tmp = f"{file_or_path}.tmp-{os.getpid()}"
            torch.save(cpu_data, tmp)
            os.replace(tmp, file_or_path)  # never leave a half-written checkpoint
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


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Concatenate every replica's `value` along `dim`."""
    from ..distributed import collectives
    return collectives.all_gather(value, dim, groups, output)


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None,  # noqa: A002
                   pin_layout=True):
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
    if count > 1:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        all_reduce(REDUCE_SUM, grads, scale=1.0 / count, groups=groups)


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None, pin_layout=True):  # noqa: B006
    """reduce_gradients, then optimizer.step(**optimizer_args); with barrier, mark_step."""
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
    """Wait for every ordinal at `tag`; returns every ordinal's payload, by ordinal."""
    from ..distributed import host_exchange
    return host_exchange.rendezvous(tag, payload, replicas)


def mesh_reduce(tag, data, reduce_fn):
    """Gather `data` from every ordinal and return reduce_fn(list of them)."""
    from ..distributed import host_exchange
    return host_exchange.mesh_reduce(tag, data, reduce_fn)


def do_on_ordinals(target, data=(), ordinals=(0,)):
    """Run target(*data) on the given ordinals only, then rendezvous."""
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
