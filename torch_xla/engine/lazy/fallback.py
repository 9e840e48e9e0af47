"""Ops with no lowering run on the CPU.

Inputs are read back to the host, the op runs in eager PyTorch, results are
uploaded, and mutated arguments are written back. Slow and visible in the
metrics report as aten::<op>; never a crash.
"""
import torch

from ..base import metrics
from . import views
from .tensor import XLATensor, new_base
from .transfers import to_cpu, upload_node

_warned = set()


def _to_host(a):
    if isinstance(a, XLATensor):
        return to_cpu(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_to_host(x) for x in a)
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("cpu")
    return a


def _to_device(a):
    if isinstance(a, torch.Tensor):
        node = upload_node(a)
        return new_base((node, 0), (tuple(a.shape), a.dtype))
    if isinstance(a, (list, tuple)):
        return type(a)(_to_device(x) for x in a)
    return a


def run_on_cpu(func, args, kwargs):
    name = func._schema.name.split("::")[-1]
    overload = func._schema.overload_name
    # upstream's counter names the overload unless it is the default one (aten::repeat_interleave.Tensor)
    metrics.counter(f"aten::{name}.{overload}" if overload else f"aten::{name}")
    cargs = _to_host(args)
    ckw = {k: _to_host(v) for k, v in kwargs.items()}
    out = func(*cargs, **ckw)
    # write back mutated arguments
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        orig = args[i] if i < len(args) else kwargs.get(a.name)
        new = cargs[i] if i < len(cargs) else ckw.get(a.name)
        pairs = zip(orig, new) if isinstance(orig, (list, tuple)) else [(orig, new)]
        for o, n in pairs:
            if isinstance(o, XLATensor):
                node = upload_node(n)
                views.assign(o, (node, 0))
    # results aliasing a mutated input return that input
    rets = func._schema.returns
    if len(rets) == 1 and rets[0].alias_info is not None and rets[0].alias_info.is_write:
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write and a.alias_info.before_set == rets[0].alias_info.before_set:
                return args[i] if i < len(args) else kwargs.get(a.name)
    return _to_device(out)


def handler(func):
    def h(args, kwargs):
        return run_on_cpu(func, args, kwargs)
    return h
