"""torch_xla.distributed.zero_redundancy_optimizer: ZeRO-1.

Every rank keeps the whole model, but the optimizer's state only for its piece
of each parameter: a parameter is padded along dimension 0 to a multiple of the
sharding group's size and cut into equal pieces (the layout upstream's
checkpoints have). `step()` reduce-scatters the full gradients (averaged over
the ranks, as data-parallel training does), optionally clips the pieces by the
norm of the whole gradient, runs the wrapped optimizer on the pieces and
all-gathers the updated pieces back into the parameters. All of it is recorded
in the step graph.
"""
import copy
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn

from .. import _XLAC
from .. import runtime as xr
from ..core import xla_model as xm

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    """Shard `optimizer_class`'s state over the data-parallel ranks (ZeRO-1).

    `params` and `**defaults` are what `optimizer_class` would take. Call
    `step()` instead of `xm.optimizer_step`: it reduces the gradients itself.
    `optimizer_dtype` is the dtype of the pieces the wrapped optimizer updates
    (default float32, a master copy for low-precision models); `grad_clipping`
    with `max_norm` (default 1.0) clips by the norm of the whole gradient, kept
    in `grad_norm`; `sharding_groups` splits the ranks into groups that shard
    among themselves (default: one group of every rank); `grad_norm_groups`
    adds the groups over which the norm is also summed (e.g. model-parallel
    ranks); `save_master_weights` puts the pieces in `state_dict()`;
    `higher_cc_precision` reduces gradients in `optimizer_dtype`;
    `lazy_init=True` defers sharding to an explicit `init_zero()`.
    `pin_layout`, bucket sizes and `use_grad_acc_hook` are accepted for
    compatibility; XLA combines the collectives of the step graph itself.
    """

    def __init__(self, params, optimizer_class, optimizer_dtype: Optional[torch.dtype] = None,
                 grad_clipping: bool = True, max_norm: Optional[float] = None, pin_layout: bool = True,
                 sharding_groups: Optional[Any] = None, grad_norm_groups: Optional[Any] = None,
                 lazy_init: bool = False, bucket_cap_mb_all_gather: int = 0, bucket_cap_mb_reduce_scatter: int = 0,
                 use_grad_acc_hook: bool = False, save_master_weights: bool = False,
                 higher_cc_precision: bool = False, **defaults: Any):
        super().__init__(params, defaults)
        self.global_world_size = xr.world_size()
        self.global_rank = xr.global_ordinal()
        self._sharding_groups = ([list(range(self.global_world_size))] if sharding_groups is None
                                 else [list(g) for g in sharding_groups])
        self._grad_norm_groups = grad_norm_groups
        self.optimizer_class = optimizer_class
        self.defaults = defaults
        self.optimizer_dtype = optimizer_dtype if optimizer_dtype is not None else torch.float32
        self.grad_clipping = grad_clipping
        self.max_norm = max_norm if max_norm is not None else 1.0
        self.pin_layout = pin_layout
        self.bucket_cap_mb_all_gather = bucket_cap_mb_all_gather
        self.bucket_cap_mb_reduce_scatter = bucket_cap_mb_reduce_scatter
        self.use_grad_acc_hook = use_grad_acc_hook
        self.save_master_weights = save_master_weights
        self.higher_cc_precision = higher_cc_precision
        self._grad_norm = None
        self.base_optimizer = None
        self.inited = False
        if not lazy_init:
            self.init_zero()

    # -- sharding -------------------------------------------------------------------------------------

    @property
    def sharding_groups(self):
        return self._sharding_groups

    @sharding_groups.setter
    def sharding_groups(self, groups):
        if self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer: sharding_groups cannot change after init_zero()")
        self._sharding_groups = [list(g) for g in groups]

    @property
    def grad_norm(self):
        """The norm of the whole gradient at the last clipping step (a device tensor), or None."""
        return self._grad_norm

    def _collective_groups(self):
        # one group of every rank is the default of the collectives themselves
        return None if len(self._sharding_groups) == 1 else self._sharding_groups

    def init_zero(self):
        """Cut the parameters into this rank's pieces and build the wrapped optimizer over them."""
        mine = [g for g in self._sharding_groups if self.global_rank in g]
        if len(mine) != 1:
            raise ValueError(f"ZeroRedundancyOptimizer: rank {self.global_rank} must be in exactly one of the "
                             f"sharding_groups {self._sharding_groups}")
        self.local_world_size = len(mine[0])
        self.local_rank = mine[0].index(self.global_rank)
        devices = {p.device for g in self.param_groups for p in g["params"]}
        if len(devices) != 1 or next(iter(devices)).type != "xla":
            raise ValueError("ZeroRedundancyOptimizer: every parameter must be on the same XLA device; got "
                             + ", ".join(sorted(str(d) for d in devices)))
        self.device = next(iter(devices))
        groups = []
        for group in self.param_groups:
            pieces = []
            for p in group["params"]:
                with torch.no_grad():
                    piece = self._piece(p.detach()).to(self.optimizer_dtype)
                pieces.append(nn.Parameter(piece, requires_grad=p.requires_grad))
            g = dict(group)
            g["params"] = pieces
            groups.append(g)
        # computed now, in a small graph of this rank's own: left pending, this rank's slice
        # offsets would be constants in the first step's program, which then differs on every
        # rank and is compiled by each instead of once for the job (engine/compile/share.py)
        _XLAC._xla_sync_multi([p for g in groups for p in g["params"]], [], wait=False)
        self.base_optimizer = self.optimizer_class(groups, **self.defaults)
        self._copy_hyperparameters(self.param_groups, self.base_optimizer.param_groups)
        self.inited = True

    def _padded(self, t):
        if t.dim() == 0:
            t = t.reshape(1)
        pad = -t.shape[0] % self.local_world_size
        if pad:
            t = torch.cat([t, t.new_zeros((pad,) + tuple(t.shape[1:]))])
        return t

    def _piece(self, t):
        t = self._padded(t)
        n = t.shape[0] // self.local_world_size
        return t[self.local_rank * n:(self.local_rank + 1) * n].clone()

    @staticmethod
    def _copy_hyperparameters(src, dst):
        """Learning rate and the rest (a scheduler writes them into our groups) follow
        from `src` into `dst`, parameters excluded."""
        if len(src) != len(dst):
            raise RuntimeError("ZeroRedundancyOptimizer: the wrapped optimizer has a different number of "
                               "parameter groups")
        for s, d in zip(src, dst):
            for k, v in s.items():
                if k != "params":
                    d[k] = v

    def _pairs(self):
        for group, sharded in zip(self.param_groups, self.base_optimizer.param_groups):
            yield from zip(group["params"], sharded["params"])

    # -- the step ---------------------------------------------------------------------------------------

    def _reduce_gradients(self):
        self._copy_hyperparameters(self.param_groups, self.base_optimizer.param_groups)
        for p, piece in self._pairs():
            if p.grad is None:
                piece.grad = None
                continue
            g = self._padded(p.grad.detach())
            if self.higher_cc_precision:
                g = g.to(self.optimizer_dtype)
            g = xm.reduce_scatter(xm.REDUCE_SUM, g, 1.0 / self.local_world_size, 0, self.local_world_size,
                                  groups=self._collective_groups())
            piece.grad = g.to(self.optimizer_dtype) if g.dtype != self.optimizer_dtype else g

    def _clip(self):
        grads = [piece.grad for _, piece in self._pairs() if piece.grad is not None]
        total = torch.zeros((), dtype=self.optimizer_dtype, device=self.device)
        for g in grads:
            total = total + (g.float() * g.float()).sum().to(self.optimizer_dtype)
        total = xm.all_reduce(xm.REDUCE_SUM, total, groups=self._collective_groups())
        if self._grad_norm_groups is not None:
            total = xm.all_reduce(xm.REDUCE_SUM, total, groups=self._grad_norm_groups)
        self._grad_norm = total.sqrt()
        coef = torch.clamp(float(self.max_norm) / (self._grad_norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))

    def _gather_parameters(self):
        for p, piece in self._pairs():
            if p.grad is None:
                continue
            full = xm.all_gather(piece.detach().to(p.dtype), dim=0, groups=self._collective_groups())
            n = p.shape[0] if p.dim() else 1
            p.copy_(full[:n].reshape(p.shape))

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """Reduce-scatter the gradients, clip, step the wrapped optimizer on this rank's
        pieces, all-gather the pieces into the parameters. Returns closure's loss."""
        if not self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer: call init_zero() first (lazy_init=True)")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._reduce_gradients()
        if self.grad_clipping:
            self._clip()
        kwargs.pop("sharding_scheme", None)
        self.base_optimizer.step(**kwargs)
        self.base_optimizer.zero_grad(set_to_none=True)
        self._gather_parameters()
        self._copy_hyperparameters(self.base_optimizer.param_groups, self.param_groups)
        return loss

    def allgather_weights_and_update_full_parameter(self, sharding_scheme=None):
        """Write the current pieces into the full parameters (of those with a gradient)."""
        with torch.no_grad():
            self._gather_parameters()

    # -- state ------------------------------------------------------------------------------------------

    def get_shape_info(self) -> Dict[int, torch.Size]:
        """The full shape of every parameter, by its index in the state dict."""
        return {i: p.shape for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def state_dict(self):
        """The outer optimizer's state dict (param groups) plus `base_state` (this
        rank's pieces of the optimizer state), `shape_info` and, with
        save_master_weights, `sharded_master_weights`."""
        sd = super().state_dict()
        sd["base_state"] = self.base_optimizer.state_dict()["state"]
        sd["shape_info"] = self.get_shape_info()
        if self.save_master_weights:
            sd["sharded_master_weights"] = {i: piece.data for i, (_, piece) in enumerate(self._pairs())}
        return sd

    def _check_pieces(self, state_dict):
        pieces = [piece for _, piece in self._pairs()]
        shapes = state_dict.get("shape_info", {})
        for idx, st in state_dict.get("base_state", {}).items():
            if idx >= len(pieces):
                raise ValueError(f"ZeroRedundancyOptimizer.load_state_dict: the state has parameter {idx}, this "
                                 f"optimizer has {len(pieces)} parameters")
            for name, t in st.items():
                if torch.is_tensor(t) and t.dim() > 0 and tuple(t.shape) != tuple(pieces[idx].shape):
                    full = tuple(shapes.get(idx, ()))
                    saved = (f" (a {full} parameter cut into pieces of {tuple(t.shape)}: "
                             f"{self._world_of(full, t.shape)} ranks)" if full else "")
                    raise ValueError(
                        f"ZeroRedundancyOptimizer.load_state_dict: state '{name}' of parameter {idx} has shape "
                        f"{tuple(t.shape)}{saved}, but this rank's piece is {tuple(pieces[idx].shape)} "
                        f"({self.local_world_size} ranks): the state was saved with another world size or "
                        "sharding_groups")
        masters = state_dict.get("sharded_master_weights", {})
        for idx, t in masters.items():
            if idx < len(pieces) and tuple(t.shape) != tuple(pieces[idx].shape):
                raise ValueError(f"ZeroRedundancyOptimizer.load_state_dict: master weight {idx} has shape "
                                 f"{tuple(t.shape)}, this rank's piece is {tuple(pieces[idx].shape)}: saved with "
                                 "another world size or sharding_groups")

    @staticmethod
    def _world_of(full, piece):
        rows = full[0] if len(full) else 1
        return max(1, -(-rows // piece[0])) if piece[0] else "?"

    def load_state_dict(self, state_dict):
        state_dict = copy.deepcopy(state_dict)
        base_state = state_dict.pop("base_state")
        masters = state_dict.pop("sharded_master_weights", None)
        state_dict.pop("shape_info", None)
        super().load_state_dict(state_dict)
        self.init_zero()   # fresh pieces of the (possibly reloaded) parameters
        self._check_pieces({"base_state": base_state, "sharded_master_weights": masters or {},
                            "shape_info": self.get_shape_info()})
        inner = self.base_optimizer.state_dict()
        inner["state"] = base_state
        inner["param_groups"] = state_dict["param_groups"]
        self.base_optimizer.load_state_dict(inner)
        if masters is not None:
            with torch.no_grad():
                for i, (p, piece) in enumerate(self._pairs()):
                    saved = masters.get(i)
                    if saved is not None:
                        piece.copy_(saved.to(piece.device, piece.dtype))
                for p, piece in self._pairs():
                    full = xm.all_gather(piece.detach().to(p.dtype), dim=0, groups=self._collective_groups())
                    n = p.shape[0] if p.dim() else 1
                    p.copy_(full[:n].reshape(p.shape))
            xm.mark_step()

    def zero_grad(self, set_to_none: bool = False):
        super().zero_grad(set_to_none=set_to_none)
