"""XlaFullyShardedDataParallel: ZeRO-2/3 data parallelism across processes.

How it works here. At construction every parameter the wrapper manages (those of
its module not inside a nested wrapper) is flattened, padded and cut into
`world_size` pieces; the process keeps its piece as a new Parameter registered on
the wrapper (`_fsdp_shard...`), and the module loses the original. The optimizer
therefore sees (and keeps state for) shards only.

In forward the wrapper all-gathers the shards (`_Gather`, an autograd Function)
and binds views of the gathered tensors as plain attributes of the module
(`module.weight`), runs the module, and unbinds them. `_Gather`'s backward
reduce-scatters the full gradient (averaged over the ranks, as DDP does), so the
shard's `.grad` is this rank's piece of the averaged gradient and a plain
`optimizer.step()` updates the model; everything is recorded in the step graph,
and the collectives run when it runs.

ZeRO-3 (`reshard_after_forward=True`): tensors that autograd saves from a
gathered parameter are not kept; a saved-tensor hook stores a note instead and
the backward pass all-gathers the shard again (through an optimization barrier,
so XLA cannot merge it with the forward's gather and keep the full parameter
alive across the step). ZeRO-2 keeps what autograd saved.
"""
import contextlib
import functools
import math
from typing import Any, Callable, List, Optional

import torch
import torch.nn as nn

from ... import runtime as xr
from ...core import xla_model as xm
from .wrap import recursive_wrap

__all__ = ["XlaFullyShardedDataParallel"]

_SEP = "_FSDP_SHARD_SEPARATOR_"
_WRAPPED = "_fsdp_wrapped_module"


class _Unbound:
    """What a sharded parameter's attribute holds outside its wrapper's forward.
    Any use raises, naming the parameter, instead of computing with stale data."""
    __slots__ = ("qualname",)

    def __init__(self, qualname):
        self.qualname = qualname

    def _error(self):
        return RuntimeError(
            f"{self.qualname} is sharded by XlaFullyShardedDataParallel: the full parameter exists only while "
            "its FSDP module runs forward (and its backward). Use it inside that forward, read the shards from "
            "the wrapper's parameters(), or consolidate a checkpoint (consolidate_sharded_model_checkpoints) "
            "to get the full tensor")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, _Unbound):
                raise a._error()
        raise RuntimeError("a parameter sharded by XlaFullyShardedDataParallel was used outside its forward")

    def __getattr__(self, name):
        raise self._error()

    def __repr__(self):
        return f"<{self.qualname}: sharded by XlaFullyShardedDataParallel>"


def _refuse(self, *args, **kwargs):
    raise self._error()


for _op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "pow", "mod", "and", "or", "xor"):
    setattr(_Unbound, f"__{_op}__", _refuse)
    setattr(_Unbound, f"__r{_op}__", _refuse)
for _op in ("neg", "pos", "abs", "getitem", "setitem", "len", "iter", "float", "int", "bool", "lt", "le",
            "gt", "ge"):
    setattr(_Unbound, f"__{_op}__", _refuse)


class _Slot:
    """One gathered parameter group during one forward: ZeRO-3's saved-tensor notes
    point here, and the first one unpacked in backward gathers again."""
    __slots__ = ("owner", "index", "value")

    def __init__(self, owner, index):
        self.owner, self.index, self.value = owner, index, None

    def full(self):
        if self.value is None:
            self.value = self.owner._regather(self.index)
        return self.value


# id(gathered tensor) -> (tensor, slot), for the forwards now running with ZeRO-3
_LIVE = {}


def _pack(t):
    base = t._base if t._base is not None else t
    hit = _LIVE.get(id(base))
    if hit is None or hit[0] is not base:
        return t
    return (_Slot, hit[1], None if t is base else t._view_func)


def _unpack(x):
    if type(x) is tuple and len(x) == 3 and x[0] is _Slot:
        full = x[1].full()
        return full if x[2] is None else x[2](full)
    return x


class _Gather(torch.autograd.Function):
    """shard -> full parameter (all-gather); backward: full gradient -> shard
    gradient (reduce-scatter, averaged)."""

    @staticmethod
    def forward(ctx, shard, owner, index):
        ctx.owner, ctx.index, ctx.dtype = owner, index, shard.dtype
        return owner._all_gather(shard, barrier=owner.optimization_barrier_in_forward)

    @staticmethod
    def backward(ctx, grad):
        return ctx.owner._reduce_grad(grad, ctx.index, ctx.dtype), None, None


class _Group:
    """One shard Parameter and the full tensors it stands for: a single parameter
    (with every module attribute bound to it), or with flatten_parameters all
    the wrapper's parameters back to back."""
    __slots__ = ("shard", "numel", "members", "flat", "accum")

    def __init__(self, shard, numel, members, flat):
        self.shard = shard
        self.numel = numel          # elements of the full (unpadded) tensor
        self.members = members      # [(offset, shape, [(module, attr, qualname), ...])]
        self.flat = flat
        self.accum = None           # full gradient accumulated under no_sync()


def _cast_floats(dtype, value):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        out = [_cast_floats(dtype, v) for v in value]
        return type(value)(out) if not hasattr(value, "_fields") else type(value)(*out)
    if isinstance(value, dict):
        return type(value)((k, _cast_floats(dtype, v)) for k, v in value.items())
    return value


def _output_tensors(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _output_tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _output_tensors(v, out)
    return out


class XlaFullyShardedDataParallel(nn.Module):
    """Shard a module's parameters, gradients and optimizer state over the
    data-parallel processes (ZeRO-3; ZeRO-2 with `reshard_after_forward=False`).

    Wrap the model (and, for ZeRO-3 memory savings, its large submodules first,
    by hand or with `auto_wrap_policy`), build the optimizer over the wrapped
    model's parameters (the shards), and call `optimizer.step()` directly: the
    gradients are already reduced, so `xm.optimizer_step` must not be used.
    Save `model.state_dict()` with `model.get_shard_metadata()` on every rank and
    merge them with `consolidate_sharded_model_checkpoints`.

    Arguments follow upstream's. `compute_dtype` (default: the parameters' dtype)
    is the dtype of the gathered parameters and of floating inputs;
    `buffer_dtype` (default: compute_dtype) that of the buffers;
    `fp32_reduce_scatter` reduces gradients in float32; `sharding_groups` with
    `sharding_rank`/`sharding_world_size` shard within groups of ranks and
    average across the groups (hybrid sharding); `shard_param_on_dim_0` cuts
    parameters along dimension 0 instead of flattening them;
    `optimization_barrier_in_forward`/`_in_backward` put the gathered parameters
    and the gradients through XLA optimization barriers (they keep XLA from
    hoisting every gather to the start of the step); `sync_on_finalization`
    (`mark_step_on_finalization`) runs the step graph at the end of backward.
    `pin_layout_in_collective_ops`, `coalesce_all_gather_ops`,
    `reduce_scatter_bucket_size_mb` and `_use_xla_patched_linear` are accepted
    for compatibility: the collectives here are compiled into the step graph,
    where XLA schedules and combines them itself.
    """

    def __init__(self, module: nn.Module, reshard_after_forward: bool = True, flatten_parameters: bool = False,
                 execute_sharding_on_init: bool = True, optimization_barrier_in_forward: bool = True,
                 optimization_barrier_in_backward: bool = True, sync_on_finalization: bool = False,
                 disable_reshard_on_root: bool = True, compute_dtype: Optional[torch.dtype] = None,
                 buffer_dtype: Optional[torch.dtype] = None, fp32_reduce_scatter: bool = False,
                 sharding_groups: Optional[List[List[int]]] = None, sharding_rank: Optional[int] = None,
                 sharding_world_size: Optional[int] = None, shard_param_on_dim_0: bool = False,
                 pin_layout_in_collective_ops: bool = True, reduce_scatter_bucket_size_mb: Optional[int] = 0,
                 coalesce_all_gather_ops: bool = False, auto_wrap_policy: Optional[Callable] = None,
                 auto_wrapper_callable: Optional[Callable] = None,
                 param_init_fn: Optional[Callable[[nn.Module], None]] = None,
                 _shard_size_multiple: int = 128, _use_xla_patched_linear: bool = True,
                 mark_step_on_finalization: Optional[bool] = None, **unused_debug_kwargs: Any):
        if isinstance(module, XlaFullyShardedDataParallel):
            raise RuntimeError("XlaFullyShardedDataParallel: the module is already wrapped; for nested FSDP wrap "
                               "the inner submodules first, then the outer module")
        unknown = [k for k in unused_debug_kwargs if not k.startswith("_debug")]
        if unknown:
            raise TypeError(f"XlaFullyShardedDataParallel got unexpected keyword arguments {unknown}")
        super().__init__()
        if mark_step_on_finalization is not None:   # the argument's older name
            sync_on_finalization = mark_step_on_finalization

        self.reshard_after_forward = reshard_after_forward
        self.flatten_parameters = flatten_parameters
        self.optimization_barrier_in_forward = optimization_barrier_in_forward
        self.optimization_barrier_in_backward = optimization_barrier_in_backward
        self.sync_on_finalization = sync_on_finalization
        self.disable_reshard_on_root = disable_reshard_on_root
        self.fp32_reduce_scatter = fp32_reduce_scatter
        self.pin_layout_in_collective_ops = pin_layout_in_collective_ops
        self._shard_param_on_dim_0 = shard_param_on_dim_0 and not flatten_parameters
        self._shard_size_multiple = _shard_size_multiple
        self._init_sharding(sharding_groups, sharding_rank, sharding_world_size)
        self.xla_device = _device()

        if auto_wrap_policy is not None:
            for name, sub in module.named_modules():
                if isinstance(sub, XlaFullyShardedDataParallel):
                    raise ValueError(f"XlaFullyShardedDataParallel: {name} is already wrapped; an auto_wrap_policy "
                                     "cannot be combined with wrapping by hand")
            fsdp_kwargs = dict(
                reshard_after_forward=reshard_after_forward, flatten_parameters=flatten_parameters,
                execute_sharding_on_init=False, optimization_barrier_in_forward=optimization_barrier_in_forward,
                optimization_barrier_in_backward=optimization_barrier_in_backward,
                sync_on_finalization=False, disable_reshard_on_root=disable_reshard_on_root,
                compute_dtype=compute_dtype, buffer_dtype=buffer_dtype, fp32_reduce_scatter=fp32_reduce_scatter,
                sharding_groups=sharding_groups, sharding_rank=sharding_rank,
                sharding_world_size=sharding_world_size, shard_param_on_dim_0=shard_param_on_dim_0,
                pin_layout_in_collective_ops=pin_layout_in_collective_ops, param_init_fn=param_init_fn,
                _shard_size_multiple=_shard_size_multiple)
            recursive_wrap(module, auto_wrap_policy=auto_wrap_policy,
                           wrapper_cls=auto_wrapper_callable or XlaFullyShardedDataParallel,
                           ignored_modules=set(), ignored_params=set(), only_wrap_children=True, **fsdp_kwargs)

        _materialize(module, param_init_fn, self.xla_device)
        self._fsdp_wrapped_module = module
        self._label = type(module).__name__ + "."   # errors name a parameter as `Linear.weight`
        managed = self._managed_params(module)
        dtypes = {p.dtype for _, _, _, p in managed}
        if any(not d.is_floating_point for d in dtypes):
            raise TypeError("XlaFullyShardedDataParallel shards floating-point parameters only; got "
                            + ", ".join(sorted(str(d) for d in dtypes)))
        self.compute_dtype = compute_dtype or (next(iter(dtypes)) if len(dtypes) == 1 else torch.float32)
        self.buffer_dtype = buffer_dtype or self.compute_dtype
        self._groups_list = []
        self._shard_params(managed)
        self._move_buffers(module)
        self._checkpointed = any(hasattr(m, "_xla_checkpointed_forward_original") for m in self._own_modules())
        self._is_root = None
        self._no_sync = False
        if execute_sharding_on_init:
            xm.mark_step()

    # -- construction ------------------------------------------------------------------------------

    def _init_sharding(self, groups, rank, world):
        job_world, job_rank = xr.world_size(), xr.global_ordinal()
        if groups is None:
            self.sharding_groups = None
            self.rank, self.world_size = job_rank, job_world
            self._replica_groups = None
            return
        groups = [list(g) for g in groups]
        mine = [g for g in groups if job_rank in g]
        if len(mine) != 1:
            raise ValueError(f"XlaFullyShardedDataParallel: rank {job_rank} must be in exactly one of "
                             f"sharding_groups={groups}")
        size = len(mine[0])
        if sharding_rank_mismatch(rank, mine[0].index(job_rank)) or sharding_rank_mismatch(world, size):
            raise ValueError(f"XlaFullyShardedDataParallel: sharding_rank={rank} / sharding_world_size={world} "
                             f"disagree with sharding_groups={groups} (this rank is {mine[0].index(job_rank)} of "
                             f"{size} in its group)")
        self.sharding_groups = groups
        self.rank, self.world_size = mine[0].index(job_rank), size
        # the ranks holding the same shard in each group: gradients are averaged over them too
        self._replica_groups = ([[g[i] for g in groups] for i in range(size)] if len(groups) > 1 else None)
        self._job_world = job_world

    def _own_modules(self):
        """The wrapped module and its descendants, not entering nested wrappers."""
        out, stack = [], [self._fsdp_wrapped_module]
        while stack:
            m = stack.pop()
            out.append(m)
            stack.extend(c for c in m.children() if not isinstance(c, XlaFullyShardedDataParallel))
        return out

    def _managed_params(self, module):
        """[(module, attr, qualname, param)] of the parameters this wrapper shards,
        a shared parameter listed once per place it is bound."""
        out = []


        def walk(prefix, m):
            for n, p in m._parameters.items():
                if p is not None:
                    out.append((m, n, prefix + n, p))
            for cn, c in m._modules.items():
                if c is not None and not isinstance(c, XlaFullyShardedDataParallel):
                    walk(prefix + cn + ".", c)
        walk("", module)
        return out

    def _padded(self, t):
        """Flattened (or, with shard_param_on_dim_0, kept whole) and padded so that it
        splits into world_size equal pieces."""
        if self._shard_param_on_dim_0 and t.dim() > 0:
            pad = -t.shape[0] % self.world_size
            return torch.cat([t, t.new_zeros((pad,) + tuple(t.shape[1:]))]) if pad else t
        t = t.reshape(-1)
        pad = -t.numel() % (self.world_size * self._shard_size_multiple)
        return torch.cat([t, t.new_zeros(pad)]) if pad else t

    def _piece(self, full):
        n = full.shape[0] // self.world_size
        return full[self.rank * n:(self.rank + 1) * n].clone()

    def _new_shard(self, data, requires_grad, orig_size, orig_name):
        p = nn.Parameter(data.to(self.xla_device), requires_grad=requires_grad)
        p._is_sharded = True
        p._orig_size = torch.Size(orig_size)
        p._orig_name = orig_name
        p._name = ("_fsdp_shard." + orig_name).replace(".", _SEP)
        self.register_parameter(p._name, p)
        return p

    @torch.no_grad()
    def _shard_params(self, managed):
        firsts, binds = [], {}
        for m, n, qual, p in managed:
            if id(p) not in binds:
                binds[id(p)] = []
                firsts.append((qual, p))
            binds[id(p)].append((m, n, self._label + qual))
        for m, n, qual, _ in managed:
            del m._parameters[n]
            object.__setattr__(m, n, _Unbound(self._label + qual))
        self._flatten_meta = None
        if self.flatten_parameters and firsts:
            if len({p.dtype for _, p in firsts}) > 1 or len({p.requires_grad for _, p in firsts}) > 1:
                raise ValueError("XlaFullyShardedDataParallel(flatten_parameters=True): the parameters of one "
                                 "wrapper must share a dtype and requires_grad; wrap the frozen or differently "
                                 "typed submodules separately")
            flat = torch.cat([p.detach().reshape(-1) for _, p in firsts])
            members, off = [], 0
            for qual, p in firsts:
                members.append((off, tuple(p.shape), binds[id(p)]))
                off += p.numel()
            name = _WRAPPED + ".flat_param_0"
            shard = self._new_shard(self._piece(self._padded(flat)), firsts[0][1].requires_grad, (off,), name)
            self._groups_list.append(_Group(shard, off, members, True))
            self._flatten_meta = {name: ([q for q, _ in firsts], [tuple(p.shape) for _, p in firsts],
                                         [p.numel() for _, p in firsts])}
            return
        for qual, p in firsts:
            piece = self._piece(self._padded(p.detach()))   # cut where it lives: only the piece travels
            shard = self._new_shard(piece, p.requires_grad, p.shape, _WRAPPED + "." + qual)
            self._groups_list.append(_Group(shard, p.numel(), [(0, tuple(p.shape), binds[id(p)])], False))

    @torch.no_grad()
    def _move_buffers(self, module):
        for m in self._own_modules():
            for k, b in list(m._buffers.items()):
                if b is not None and b.device != self.xla_device:
                    m._buffers[k] = b.to(self.xla_device)

    # -- collectives --------------------------------------------------------------------------------

    def _all_gather(self, shard, barrier):
        x = shard.to(self.compute_dtype) if shard.dtype != self.compute_dtype else shard
        full = xm.all_gather(x, dim=0, groups=self.sharding_groups)
        if barrier:
            xm.optimization_barrier_([full])
        return full

    def _regather(self, index):
        """ZeRO-3's second gather, in backward: the shard passes through a barrier first,
        so XLA sees a different operand than the forward's gather and cannot merge them."""
        with torch.no_grad():
            s = self._groups_list[index].shard.detach().clone()
            xm.optimization_barrier_([s])   # always: without it ZeRO-3 would silently become ZeRO-2
            return self._all_gather(s, barrier=False)

    def _reduce_grad(self, grad, index, dtype):
        group = self._groups_list[index]
        if self._no_sync:
            group.accum = grad.detach().clone() if group.accum is None else group.accum + grad
            return None
        if group.accum is not None:
            grad, group.accum = grad + group.accum, None
        if self.fp32_reduce_scatter and grad.dtype != torch.float32:
            grad = grad.float()
        if self.optimization_barrier_in_backward:
            grad = grad.clone()
            xm.optimization_barrier_([grad])
        total = self._job_world if self.sharding_groups is not None else self.world_size
        g = xm.reduce_scatter(xm.REDUCE_SUM, grad, 1.0 / total, 0, self.world_size, groups=self.sharding_groups)
        if self.sharding_groups is not None and self._replica_groups is not None:
            xm.all_reduce(xm.REDUCE_SUM, [g], groups=self._replica_groups)
        return g.to(dtype) if g.dtype != dtype else g

    # -- forward -------------------------------------------------------------------------------------

    def _lazy_init(self):
        """The first wrapper to run forward is the root: nested wrappers learn they are not."""
        for m in self.modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                m._is_root = m is self
        if self.buffer_dtype is not None:
            with torch.no_grad():
                for m in self.modules():
                    for k, b in list(m._buffers.items()):
                        if b is not None and b.is_floating_point() and b.dtype != self.buffer_dtype:
                            nb = b.to(self.buffer_dtype)
                            nb._orig_dtype = b.dtype
                            m._buffers[k] = nb

    def _bind(self, grad):
        fulls = []
        for i, g in enumerate(self._groups_list):
            full = _Gather.apply(g.shard, self, i) if grad else self._all_gather(g.shard.detach(), False)
            fulls.append(full)
            for off, shape, targets in g.members:
                if g.flat:
                    view = full.narrow(0, off, math.prod(shape)).view(shape)
                elif self._shard_param_on_dim_0 and len(shape) > 0:
                    view = full[:shape[0]]
                else:
                    view = full[:g.numel].view(shape)
                for m, n, _ in targets:
                    object.__setattr__(m, n, view)
        return fulls

    def _unbind(self):
        for g in self._groups_list:
            for _, _, targets in g.members:
                for m, n, qual in targets:
                    object.__setattr__(m, n, _Unbound(qual))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_root is None:
            self._lazy_init()
        if self.compute_dtype != torch.float32:
            args, kwargs = _cast_floats(self.compute_dtype, args), _cast_floats(self.compute_dtype, kwargs)
        grad = torch.is_grad_enabled()
        fulls = self._bind(grad)
        zero3 = grad and self.reshard_after_forward and not (self._is_root and self.disable_reshard_on_root)
        keys = []
        try:
            if zero3:
                for i, f in enumerate(fulls):
                    _LIVE[id(f)] = (f, _Slot(self, i))
                    keys.append(id(f))
                with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
                    out = self._fsdp_wrapped_module(*args, **kwargs)
            else:
                out = self._fsdp_wrapped_module(*args, **kwargs)
        finally:
            for k in keys:
                _LIVE.pop(k, None)
            self._unbind()
        if grad and (self._checkpointed or (self._is_root and self.sync_on_finalization)):
            self._hook_outputs(out)
        return out

    def _hook_outputs(self, out):
        """Before backward enters this module: bind gathered parameters again when a
        checkpointed submodule will recompute its forward; at the end of backward,
        unbind them (and, on the root with sync_on_finalization, run the step)."""
        state = {"done": False}

        def before_backward(grad):
            if state["done"]:
                return grad
            state["done"] = True
            engine = torch.autograd.Variable._execution_engine
            if self._checkpointed:
                with torch.enable_grad():
                    self._bind(True)
                engine.queue_callback(self._unbind)
            if self._is_root and self.sync_on_finalization:
                engine.queue_callback(xm.mark_step)
            return grad

        for t in _output_tensors(out, []):
            if t.requires_grad:
                t.register_hook(before_backward)

    # -- public surface ------------------------------------------------------------------------------

    @property
    def module(self) -> nn.Module:
        """The wrapped module."""
        return self._fsdp_wrapped_module

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules[_WRAPPED], name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module[key]

    @property
    def sharded_params(self):
        return [g.shard for g in self._groups_list]

    def extra_repr(self) -> str:
        return (f"world_size={self.world_size}, rank={self.rank}, flatten_parameters={self.flatten_parameters}, "
                f"reshard_after_forward={self.reshard_after_forward}, compute_dtype={self.compute_dtype}")

    @contextlib.contextmanager
    def no_sync(self):
        """Within this context backward accumulates full gradients locally and reduces
        nothing; the first backward after it reduce-scatters the sum."""
        wrappers = [m for m in self.modules() if isinstance(m, XlaFullyShardedDataParallel)]
        old = [m._no_sync for m in wrappers]
        for m in wrappers:
            m._no_sync = True
        try:
            yield
        finally:
            for m, o in zip(wrappers, old):
                m._no_sync = o

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0, groups=None):
        """Scale the shards' gradients so that the norm of the whole (unsharded)
        gradient is at most max_norm; returns that norm (a device tensor: no host sync)."""
        if self._is_root is False:
            raise RuntimeError("clip_grad_norm_ should be called on the root XlaFullyShardedDataParallel only")
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return torch.tensor(0.0, device=self.xla_device)
        norm_type = float(norm_type)
        sgroups = groups if groups is not None else self.sharding_groups
        if math.isinf(norm_type):
            local = torch.stack([g.detach().abs().max().float() for g in grads]).max()
            total = xm.all_reduce(xm.REDUCE_MAX, local, groups=sgroups)
        else:
            local = torch.stack([g.detach().float().abs().pow(norm_type).sum() for g in grads]).sum()
            total = xm.all_reduce(xm.REDUCE_SUM, local, groups=sgroups) ** (1.0 / norm_type)
        coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return total

    def get_shard_metadata(self):
        """What consolidate_sharded_model_checkpoints needs besides the state dicts:
        per wrapper, each shard's full size and name; the flattened parameters'
        layout; buffers' original dtypes; world size and rank."""
        shard_info, flatten_info, buffer_info = {}, {}, {}
        for name, m in self.named_modules(remove_duplicate=False):
            if isinstance(m, XlaFullyShardedDataParallel):
                shard_info[name] = {p._name: {"_orig_size": p._orig_size, "_orig_name": p._orig_name}
                                    for p in m.sharded_params}
                for flat_name, meta in (m._flatten_meta or {}).items():
                    flatten_info[flat_name if not name else name + "." + flat_name] = meta
        for name, b in self.named_buffers():
            if b is not None and hasattr(b, "_orig_dtype"):
                buffer_info[name] = {"_orig_dtype": b._orig_dtype}
        return {"shard_info": shard_info, "flatten_info": flatten_info, "buffer_info": buffer_info,
                "world_size": self.world_size, "rank": self.rank}

    def get_original_names_and_sharded_parameters(self):
        """(name in the unwrapped model, shard) for every shard of this wrapper and the nested ones."""
        out = []
        for name, m in self.named_modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                prefix = name + "." if name else ""
                for p in m.sharded_params:
                    out.append(((prefix + p._orig_name).replace(_WRAPPED + ".", ""), p))
        return out

    def load_state_dict(self, state_dict, strict: bool = True, *args, **kwargs):
        own = dict(self.named_parameters())
        for key, value in state_dict.items():
            p = own.get(key)
            if p is not None and getattr(p, "_is_sharded", False) and tuple(value.shape) != tuple(p.shape):
                raise RuntimeError(
                    f"XlaFullyShardedDataParallel.load_state_dict: shard {key} has shape {tuple(value.shape)} in "
                    f"the checkpoint but {tuple(p.shape)} here: the checkpoint was saved with another world size "
                    f"or wrapping (this job shards over {self.world_size}). Consolidate it with "
                    "consolidate_sharded_model_checkpoints and load the result into the unwrapped model before "
                    "wrapping")
        return super().load_state_dict(state_dict, strict, *args, **kwargs)


def sharding_rank_mismatch(given, actual):
    return given is not None and int(given) != int(actual)


def _device():
    import torch_xla
    return torch.device(torch_xla.device())


def _materialize(module, param_init_fn, device):
    """Modules built on the meta device get real storage (on the XLA device) here:
    param_init_fn(module) when given, else to_empty() and reset_parameters()."""
    if not any(t.is_meta for t in list(module.parameters()) + list(module.buffers())):
        return
    if param_init_fn is not None:
        param_init_fn(module)
        return
    module.to_empty(device=device)
    for m in module.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()
