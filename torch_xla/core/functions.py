"""torch_xla.core.functions: collectives with autograd."""
import torch

from .. import runtime as xr
from . import xla_model as xm


class AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, reduce_type, scale, groups):  # noqa: A002
        ctx.reduce_type = reduce_type
        ctx.scale = scale
        ctx.groups = groups
        return xm.all_reduce(reduce_type, input, scale=scale, groups=groups)

    @staticmethod
    def backward(ctx, grad_output):
        return xm.all_reduce(ctx.reduce_type, grad_output, scale=ctx.scale, groups=ctx.groups), None, None, None


def all_reduce(reduce_type, value, scale=1.0, groups=None):
    """xm.all_reduce of one tensor, differentiable (the gradient is all-reduced too)."""
    return AllReduce.apply(value, reduce_type, scale, groups)


class AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, dim, groups):  # noqa: A002
        ctx.dim = dim if dim >= 0 else dim + input.dim()
        ctx.groups = groups
        ordinal = xr.global_ordinal()
        ctx.position = ordinal
        ctx.count = xr.world_size()
        if groups:
            for g in groups:
                if ordinal in g:
                    ctx.position = list(g).index(ordinal)
                    ctx.count = len(g)
        return xm.all_gather(input, dim=dim, groups=groups)

    @staticmethod
    def backward(ctx, grad_output):
        size = grad_output.size(ctx.dim) // ctx.count
        return torch.narrow(grad_output.clone(), ctx.dim, ctx.position * size, size), None, None


def all_gather(value, dim=0, groups=None):
    """xm.all_gather, differentiable: the gradient of each replica's input is its
    own slice of the output's gradient."""
    return AllGather.apply(value, dim, groups)
