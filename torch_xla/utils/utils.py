"""torch_xla.utils.utils: small helpers upstream scripts and libraries import."""
import copy
import shutil
import sys
import tempfile
import time
import types

import torch

from ..engine import api as _api


class LazyProperty:
    """A value computed by gen_fn on first access of `.value`, then kept."""

    def __init__(self, gen_fn):
        self._gen_fn = gen_fn
        self._computed = False
        self._value = None

    @property
    def value(self):
        if not self._computed:
            self._value = self._gen_fn()
            self._computed = True
        return self._value


class Cleaner:
    """Calls func() when garbage collected."""

    def __init__(self, func):
        self.func = func

    def __del__(self):
        self.func()


class TmpFolder:
    """A temporary directory (`.name`) removed when the object is dropped."""

    def __init__(self):
        self.name = tempfile.mkdtemp()
        self._cleaner = Cleaner(lambda name=self.name: shutil.rmtree(name, ignore_errors=True))


class SampleGenerator:
    """Yields the same `data` sample_count times: a synthetic data loader.

    Upstream's examples use it as `SampleGenerator(data=(x, y), sample_count=n)`
    in place of a DataLoader when --fake_data is set."""

    def __init__(self, data, sample_count):
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __iter__(self):
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self):
        return self._sample_count

    def __next__(self):
        return self.next()

    def next(self):
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data


class FnDataGenerator:
    """Synthetic (data, target) batches: target = func(data) for data drawn by gen_tensor
    (default: torch.randn), `count` batches of `batch_size`."""

    def __init__(self, func, batch_size, gen_tensor=None, dims=None, count=1):
        self._func = func
        self._batch_size = batch_size
        self._gen_tensor = gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count
        self._emitted = 0

    def __len__(self):
        return self._count

    def __iter__(self):
        return FnDataGenerator(self._func, self._batch_size, gen_tensor=self._gen_tensor,
                               dims=self._dims, count=self._count)

    def __next__(self):
        return self.next()

    def next(self):
        if self._emitted >= self._count:
            raise StopIteration
        self._emitted += 1
        make = self._gen_tensor or torch.randn
        data = make(self._batch_size, *self._dims)
        return data, self._func(data)


class DataWrapper:
    """Base of user containers the parallel loader and the arenas look inside:
    get_tensors() lists the tensors, from_tensors(tensors) rebuilds the object."""

    def get_tensors(self):
        raise NotImplementedError("DataWrapper subclasses implement get_tensors()")

    def from_tensors(self, tensors):
        raise NotImplementedError("DataWrapper subclasses implement from_tensors()")


class TimedScope:
    """Context manager printing `msg` and the elapsed seconds on exit."""

    def __init__(self, msg="", printfn=None):
        self._msg = msg
        self._printfn = printfn or eprint
        self._start = None

    def __enter__(self):
        self._start = time.time()
        return self

    def __exit__(self, *exc):
        self._printfn(f"{self._msg}{time.time() - self._start:.3f}s")
        return False


def as_list(t):
    """A list or tuple unchanged; anything else as [t]."""
    return t if isinstance(t, (list, tuple)) else [t]


def getenv_as(name, type, defval=None):  # noqa: A002  (upstream's parameter name)
    """os.environ[name] converted with `type` (bool accepts 0/1/true/false), else defval.
    A variable torch_xla declares (docs/reference/knobs.md) is read through its config, so
    config.override applies to it too."""
    env = _api.config.environ_value(name)
    if env is None:
        return defval
    if type is bool:
        return env.strip().lower() not in ("", "0", "false", "no", "off")
    return type(env)


def check_env_flag(name, default=""):
    """True when the environment variable is 1/true/yes/on (case-insensitive)."""
    env = _api.config.environ_value(name)
    return (default if env is None else env).upper() in ("ON", "1", "YES", "TRUE", "Y")


def _rebuild_like(value, items):
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*items)
    return type(value)(items)


_OPAQUE = (torch.Tensor, type, types.ModuleType, types.FunctionType, types.MethodType,
           types.BuiltinFunctionType)


def _walk(value, select_fn, fn, rewrite, seen):
    # Every object is visited once by identity (a shared object, or an interned
    # leaf such as a small int, is handed to fn once; a cycle ends), as upstream.
    # Walked: dict keys and values, lists, tuples, sets, DataWrappers and the
    # attributes of plain objects (copied before rewriting, so the input is
    # never changed).
    vid = id(value)
    if vid in seen:
        return seen[vid]
    if select_fn(value):
        if rewrite:
            result = seen[vid] = fn(value)
            return result
        seen[vid] = value
        fn(value)
        return value
    seen[vid] = value
    if isinstance(value, dict):
        out = {}
        if rewrite and type(value) is dict:
            seen[vid] = out
        for k, v in value.items():
            k2 = _walk(k, select_fn, fn, rewrite, seen)
            out[k2] = _walk(v, select_fn, fn, rewrite, seen)
        if not rewrite:
            return value
        if type(value) is not dict:
            try:
                out = type(value)(out)
            except TypeError:
                pass
        seen[vid] = out
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        # a plain list is registered before its items, so a cycle through it ends in it
        out = [] if rewrite and type(value) is list else None
        if out is not None:
            seen[vid] = out
        items = [_walk(v, select_fn, fn, rewrite, seen) for v in value]
        if not rewrite:
            return value
        if out is not None:
            out.extend(items)
        else:
            out = _rebuild_like(value, items)
        seen[vid] = out
        return out
    if isinstance(value, DataWrapper):
        items = [_walk(v, select_fn, fn, rewrite, seen) for v in value.get_tensors()]
        if not rewrite:
            return value
        out = seen[vid] = value.from_tensors(items)
        return out
    if hasattr(value, "__dict__") and not isinstance(value, _OPAQUE):
        target = value
        if rewrite:
            target = seen[vid] = copy.copy(value)
        for k in list(vars(target)):
            v = _walk(vars(target)[k], select_fn, fn, rewrite, seen)
            if rewrite:
                vars(target)[k] = v
        return target
    return value


def for_each_instance(value, select_fn, fn):
    """Call fn(x) for every x in the nested lists/tuples/sets/dicts of `value` where
    select_fn(x) is true (each shared object visited once)."""
    _walk(value, select_fn, fn, False, {})


def for_each_instance_rewrite(value, select_fn, fn):
    """A copy of the nested structure with every selected x replaced by fn(x)."""
    return _walk(value, select_fn, fn, True, {})


def shape(inputs):
    """The shapes of a tensor, or of each tensor in nested lists/tuples."""
    if isinstance(inputs, (list, tuple)):
        return [shape(x) for x in inputs]
    return list(inputs.shape) if isinstance(inputs, torch.Tensor) else None


def flatten_nested_tuple(inputs):
    """The leaves of nested tuples, in order, as a flat tuple."""
    out = []

    def add(x):
        if isinstance(x, tuple):
            for y in x:
                add(y)
        else:
            out.append(x)
    add(inputs)
    return tuple(out)


def list_copy_append(ilist, item):
    """A copy of ilist with item appended."""
    return list(ilist) + [item]


def null_print(*args, **kwargs):
    """A print that prints nothing."""


def eprint(*args, **kwargs):
    """print to stderr."""
    print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug=None):
    """eprint when debug (default: env DEBUG set), else null_print."""
    if debug is None:
        debug = _api.config.read("DEBUG")
    return eprint if debug else null_print


def timed(fn, msg="", printfn=eprint):
    """Run fn(), print msg and the seconds it took, return its result."""
    start = time.time()
    result = fn()
    if printfn is not None:
        printfn(f"{msg}{time.time() - start:.3f}s")
    return result


def parallel_work(num_workers, fn, *args):
    """`[fn(*a) for a in zip(*args)]` on a pool of num_workers threads, in order."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=num_workers) as pool:
        return list(pool.map(fn, *args))


def get_free_tcp_ports(n=1):
    """n free TCP ports on this host."""
    import socket
    ports, socks = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports

