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


class SyncBatchNorm(torch.nn.Module):
    """Batch normalization whose batch statistics span every replica: each
    process normalizes its part of the global batch with the mean and variance
    of the whole batch (per-channel sums all-reduced inside the graph, with
    gradients flowing back through the reduction). Channels are dimension 1 of
    an (N, C, ...) input. In eval mode the running statistics are used.

    Args:
      num_features: the number of channels C.
      eps: added to the variance for numerical stability.
      momentum: weight of the new batch statistics in the running ones.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.weight = torch.nn.Parameter(torch.ones(num_features))
        self.bias = torch.nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _shape(self, x):
        return [1, self.num_features] + [1] * (x.dim() - 2)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.dim() < 2 or batch.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: expected an (N, {self.num_features}, ...) input, "
                             f"got shape {list(batch.shape)}")
        shape = self._shape(batch)
        if self.training:
            dims = [d for d in range(batch.dim()) if d != 1]
            count = batch.numel() // self.num_features
            local = torch.stack([batch.sum(dims), (batch * batch).sum(dims)])
            total = all_reduce(xm.REDUCE_SUM, local) if xr.world_size() > 1 else local
            n = count * xr.world_size()
            mean = total[0] / n
            var = total[1] / n - mean * mean
            with torch.no_grad():
                m = self.momentum
                unbiased = var * (n / max(n - 1, 1))
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.detach(), alpha=m)
        else:
            mean, var = self.running_mean, self.running_var
        scale = self.weight.view(shape) * torch.rsqrt(var.view(shape) + self.eps)
        return (batch - mean.view(shape)) * scale + self.bias.view(shape)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"
