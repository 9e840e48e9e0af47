"""Batch norm at the tensor level: one internal op computes the output, the
saved statistics and the updated running statistics, which are written back
into the running-stat tensors in place (the rules are ops/nn.py's)."""
import torch

from ...ops.nn import batch_norm_lowering, batch_norm_meta
from ...ops.op import OpInfo
from ...ops.registry import handler
from .. import views
from ..dispatch import call
from ..tensor import new_base
from ..tracing import trace_node, wrap


_BN = OpInfo("native_batch_norm", None, batch_norm_lowering, meta=batch_norm_meta)


def _batch_norm(x, w, b, rm, rv, training, momentum, eps, n_out=3):
    node, e = trace_node(_BN, (x, w, b, rm, rv), dict(training=bool(training), momentum=float(momentum or 0.0),
                                                      eps=float(eps)))
    outs = wrap(node, e)
    if training:
        k = 3
        for t in (rm, rv):
            if t is not None:
                views.assign(t, (node, k))
                k += 1
    res = list(outs[:3])
    if n_out == 4:
        res.append(new_base(_empty_u8(), ((0,), torch.uint8)))
    return tuple(res)


def _empty_u8():
    t = call(torch.ops.aten.empty.memory_format, ([0],), {"dtype": torch.uint8, "device": torch.device("xla")})
    return t._lazy.value


@handler("native_batch_norm.default")
def _native_batch_norm(args, kwargs):
    return _batch_norm(*args, **kwargs)


@handler("_native_batch_norm_legit.default")
def _bn_legit(args, kwargs):
    x, w, b, rm, rv, training, momentum, eps = args
    return _batch_norm(x, w, b, rm, rv, training, momentum, eps)


@handler("_native_batch_norm_legit.no_stats")
def _bn_legit_nostats(args, kwargs):
    x, w, b, training, momentum, eps = args
    return _batch_norm(x, w, b, None, None, True, momentum, eps)


@handler("_native_batch_norm_legit_no_training.default")
def _bn_legit_eval(args, kwargs):
    x, w, b, rm, rv, momentum, eps = args
    return _batch_norm(x, w, b, rm, rv, False, momentum, eps)


@handler("_batch_norm_with_update.default")
def _bn_with_update(args, kwargs):
    x, w, b, rm, rv, momentum, eps = args
    return _batch_norm(x, w, b, rm, rv, True, momentum, eps, n_out=4)


@handler("_batch_norm_no_update.default")
def _bn_no_update(args, kwargs):
    x, w, b, rm, rv, momentum, eps = args
    return _batch_norm(x, w, b, rm, rv, False, momentum, eps, n_out=4)
