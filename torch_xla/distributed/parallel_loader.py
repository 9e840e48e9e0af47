"""torch_xla.distributed.parallel_loader: feed the device while it computes.

A loader thread iterates the wrapped DataLoader into a host queue
(loader_prefetch_size); transfer threads move each batch to the device into a
device queue (device_prefetch_size), in order. The training loop takes batches
from the device queue; every `batches_per_execution` batches it syncs
(xm.mark_step), so a step's graph runs while the next batches upload. An
exception in a worker is re-raised in the training loop; at the end of the
epoch, or when the loop breaks out, the threads stop.

A wrapped loader that reports where it is (`end_of_dataloader`, as
accelerate's DataLoaderShard does) is read at the training loop's pace
instead: reading ahead would flip that flag while the loop still holds
earlier batches (accelerate then skips the last batch's gradient sync and
keeps gather_for_metrics' padding). Its batches still upload asynchronously.
"""
import collections
import queue
import threading
import weakref

import torch

_END = object()


class _Failure:
    def __init__(self, exc):
        self.exc = exc


def _upload(cpu, device):
    """A device tensor holding cpu's values, made without recording any IR: the
    training loop may sync on its thread while this runs on a worker thread."""
    if cpu.device.type == "xla" or torch.device(device).type != "xla":
        return cpu.to(device)
    from ..engine import api
    cpu = cpu.detach()
    if not cpu.is_contiguous():
        cpu = cpu.contiguous()
    return api.upload(cpu, device)


def _to_device(data, device, sharding=None):
    if isinstance(data, torch.Tensor):
        if data.device.type == "cpu" and _spmd_layout(sharding):
            # upstream: a ShardingSpec where the rank fits (minibatch: this host's rows), else replicated
            from .spmd import xla_sharding as xs
            return xs._input_to_device(data, lambda c: _upload(c, device), sharding)
        t = _upload(data, device)
        if sharding is not None:
            _apply_sharding(t, sharding)
        return t
    if isinstance(data, dict):
        return type(data)((k, _to_device(v, device, sharding)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*[_to_device(v, device, sharding) for v in data])
    if isinstance(data, (list, tuple)):
        return type(data)(_to_device(v, device, sharding) for v in data)
    return data


def _spmd_layout(sharding):
    from ..engine import api
    if not api.topology.spmd_enabled():
        return False
    from .spmd import xla_sharding as xs
    return sharding is None or isinstance(sharding, xs.ShardingSpec)


def _batch_to_device(batch, device, input_sharding):
    """A loaded batch on the device. A dict `input_sharding` names the
    ShardingSpec of each key of a dict batch (every key must have one)."""
    if not isinstance(input_sharding, dict):
        return _to_device(batch, device, input_sharding)
    if not isinstance(batch, dict):
        raise ValueError(f"input_sharding is a dict (keys {sorted(input_sharding)}), so each batch must be "
                         f"a dict too; got a {type(batch).__name__}")
    missing = [k for k in batch if k not in input_sharding]
    if missing:
        raise KeyError(f"keys {missing} of the batch are missing from input_sharding "
                       f"(which has {sorted(input_sharding)})")
    return type(batch)((k, _to_device(v, device, input_sharding[k])) for k, v in batch.items())


def _apply_sharding(t, sharding):
    fn = getattr(sharding, "apply", None)
    can = getattr(sharding, "can_apply", None)
    if callable(can) and not can(t):
        return  # an input_sharding fits the tensors of its rank (a batch's targets stay whole)
    if callable(fn):
        fn(t)
    elif callable(sharding):
        sharding(t)


_live = weakref.WeakSet()   # loaders whose threads may still run
_exit_hook = []


def _stop_all_at_exit():
    """Stop every loader's threads before the interpreter finalizes: a daemon
    thread caught inside a device transfer then aborts the process."""
    import time
    loaders = list(_live)
    for loader in loaders:
        loader.close()
    deadline = time.monotonic() + 10
    for loader in loaders:
        for t in loader._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))


class PerDeviceQueue:
    """The two bounded queues of one device in a ParallelLoader: CPU batches read from
    the loader, and batches already on the device."""

    def __init__(self, device, loader_prefetch_size, device_prefetch_size):
        import itertools
        import queue
        self.device = device
        self.cpu_loader_queue = queue.Queue(maxsize=loader_prefetch_size)
        self.queue = queue.Queue(maxsize=device_prefetch_size)
        self.close_queue_count = itertools.count()


class PerDeviceLoader:
    """The iterator of one device: batches already on the device."""

    def __init__(self, loader, device):
        self._loader = loader
        self._device = device
        self._mark_step_batch_count = loader.batches_per_execution - 1
        self._batches_yielded = 0
        self._exiting = False

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def __len__(self):
        return self._loader.per_device_samples()

    def next(self):
        from ..core import xla_model as xm
        from ..debug import profiler as xp
        if xp.get_tracer_marked_step():  # a StepTrace synced this step on exit
            xp.set_tracer_marked_step(False)
            self._batches_yielded += 1
        elif self._mark_step_batch_count <= self._batches_yielded:
            self._batches_yielded = 0
            xm.mark_step()
        else:
            self._batches_yielded += 1
        item = self._loader.next_item(self._device)
        if item is None:
            if not self._exiting:
                xm.mark_step()
            self._exiting = True
            raise StopIteration
        return item

    def __del__(self):
        try:
            self._loader.close()
        except Exception:  # noqa: BLE001
            pass


class ParallelLoader:
    """Wraps a DataLoader; per_device_loader(device) iterates device batches."""

    def __init__(self, loader, devices, batchdim=0, batches_per_execution=1, loader_prefetch_size=16,
                 device_prefetch_size=8, host_to_device_transfer_threads=1, input_sharding=None):
        self._loader = loader
        self._devices = [torch.device(d) for d in devices]
        self._batchdim = batchdim
        self.batches_per_execution = max(1, int(batches_per_execution))
        self._input_sharding = input_sharding
        self._done = threading.Event()
        self._paced = None
        if hasattr(loader, "end_of_dataloader"):
            self._paced = iter(loader)
            return
        self._host_q = queue.Queue(maxsize=max(1, loader_prefetch_size))
        self._device_q = queue.Queue(maxsize=max(1, device_prefetch_size))
        self._nthreads = max(1, int(host_to_device_transfer_threads))
        self._reorder = {}
        self._next_out = 0
        self._order_lock = threading.Condition()
        self._finished_workers = 0
        self._threads = []
        if not _exit_hook:
            import atexit
            atexit.register(_stop_all_at_exit)
            _exit_hook.append(True)
        # the threads hold only a weak reference to us, so dropping the loader
        # (a `break` out of the epoch) lets __del__ stop them
        me = weakref.ref(self)
        t = threading.Thread(target=ParallelLoader._loader_worker, args=(me,), daemon=True,
                             name="torch_xla-loader")
        self._threads.append(t)
        for i in range(self._nthreads):
            self._threads.append(threading.Thread(target=ParallelLoader._transfer_worker, args=(me,),
                                                  daemon=True, name=f"torch_xla-h2d-{i}"))
        for t in self._threads:
            t.start()
        _live.add(self)

    # -- public ---------------------------------------------------------------
    def per_device_loader(self, device):
        return PerDeviceLoader(self, torch.device(device))

    def per_device_samples(self):
        try:
            return len(self._loader) // len(self._devices)
        except TypeError:
            return 0

    def close(self):
        self._done.set()
        if self._paced is not None:
            self._paced = iter(())
            return
        for q in (self._host_q, self._device_q):
            try:
                while True:
                    q.get_nowait()
            except queue.Empty:
                pass

    def __del__(self):
        self.close()

    def next_item(self, device):
        if self._paced is not None:
            return self._next_paced()
        while True:
            if self._done.is_set() and self._device_q.empty():
                return None
            try:
                item = self._device_q.get(timeout=0.5)
            except queue.Empty:
                if not any(t.is_alive() for t in self._threads) and self._device_q.empty():
                    return None
                continue
            if item is _END:
                self.close()
                return None
            if isinstance(item, _Failure):
                self.close()
                raise item.exc
            return item

    def _next_paced(self):
        # the wrapped iterator advances only when the loop asks for the batch
        if self._done.is_set():
            return None
        try:
            batch = next(self._paced)
        except StopIteration:
            self.close()
            return None
        return _batch_to_device(batch, self._devices[0], self._input_sharding)

    # -- workers --------------------------------------------------------------
    def _put(self, q, item):
        while not self._done.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    @staticmethod
    def _loader_worker(ref):
        self = ref()
        if self is None:
            return
        try:
            it = iter(self._loader)
            loader_q, done = self._host_q, self._done
            n = 0
        except BaseException as e:  # noqa: BLE001
            self._emit(-1, _Failure(e))
            return
        del self
        i = 0
        while not done.is_set():
            try:
                batch = next(it)
            except StopIteration:
                break
            except BaseException as e:  # noqa: BLE001
                self = ref()
                if self is not None:
                    self._put(loader_q, (i, _Failure(e)))
                return
            self = ref()
            if self is None:
                return
            if not self._put(loader_q, (i, batch)):
                return
            del self
            i += 1
            n += 1
        self = ref()
        if self is not None:
            for _ in range(self._nthreads):
                self._put(loader_q, (i, _END))

    @staticmethod
    def _transfer_worker(ref):
        while True:
            self = ref()
            if self is None or self._done.is_set():
                return
            try:
                i, batch = self._host_q.get(timeout=0.2)
            except queue.Empty:
                del self
                continue
            if batch is _END:
                self._worker_end(i)
                return
            if isinstance(batch, _Failure):
                self._emit(i, batch)
                return
            try:
                out = _batch_to_device(batch, self._devices[0], self._input_sharding)
            except BaseException as e:  # noqa: BLE001
                self._emit(i, _Failure(e))
                return
            self._emit(i, out)
            del self, batch, out

    def _emit(self, i, item):
        """Hand item number i to the device queue in order (failures at once)."""
        if isinstance(item, _Failure) or i < 0:
            self._put(self._device_q, item)
            return
        with self._order_lock:
            while i != self._next_out and not self._done.is_set():
                self._order_lock.wait(0.2)
            if self._done.is_set():
                return
            ok = self._put(self._device_q, item)
            self._next_out += 1
            self._order_lock.notify_all()
        return ok

    def _worker_end(self, i):
        with self._order_lock:
            self._finished_workers += 1
            last = self._finished_workers == self._nthreads
        if last:
            with self._order_lock:
                while i != self._next_out and not self._done.is_set():
                    self._order_lock.wait(0.2)
            self._put(self._device_q, _END)


class MpDeviceLoader:
    """Iterates `loader` with its batches on `device` (a ParallelLoader per epoch)."""

    def __init__(self, loader, device, **kwargs):
        self._loader = loader
        self._device = device
        self._parallel_loader_kwargs = kwargs
        self._current = None

    def __iter__(self):
        if self._current is not None:
            self._current.close()
        parallel_loader = ParallelLoader(self._loader, [self._device], **self._parallel_loader_kwargs)
        self._current = parallel_loader
        return parallel_loader.per_device_loader(self._device)

    def __len__(self):
        return len(self._loader)


del collections
