"""Auto-wrap policies for XlaFullyShardedDataParallel.

A policy is called as `policy(module=m, recurse=..., unwrapped_params=n)`.
With `recurse=True` it answers "look inside m for modules to wrap?"; with
`recurse=False` it answers "wrap m itself?", where `unwrapped_params` counts
the parameters of m that no wrapped descendant took. `recursive_wrap` walks the
module tree with such a policy, wrapping bottom-up.
"""
from typing import Any, Callable, Optional, Set, Tuple, Type

import torch.nn as nn

__all__ = ["always_wrap_policy", "lambda_auto_wrap_policy", "transformer_auto_wrap_policy",
           "size_based_auto_wrap_policy", "recursive_wrap"]


def always_wrap_policy(*args, **kwargs) -> bool:
    """Wrap every submodule in its own FSDP instance."""
    return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable) -> bool:
    """Wrap exactly the submodules for which `lambda_fn(module)` is true (bind
    `lambda_fn` with functools.partial)."""
    if recurse:
        return True
    return bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
    """Wrap every instance of one of `transformer_layer_cls` (e.g. a decoder block)
    in its own FSDP unit; the rest stays with the outer unit."""
    if recurse:
        return True
    return isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8),
                                force_leaf_modules: Optional[Set[Type[nn.Module]]] = None,
                                exclude_wrap_modules: Optional[Set[Type[nn.Module]]] = None) -> bool:
    """Wrap a module once at least `min_num_params` of its parameters are not yet
    wrapped. Modules of a type in `force_leaf_modules` (default: MultiheadAttention)
    are not looked into; those in `exclude_wrap_modules` (default: ModuleList,
    ModuleDict, which have no forward) are never wrapped themselves."""
    if force_leaf_modules is None:
        force_leaf_modules = size_based_auto_wrap_policy.FORCE_LEAF_MODULES
    if exclude_wrap_modules is None:
        exclude_wrap_modules = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
    big_enough = unwrapped_params >= min_num_params
    if recurse:
        return big_enough and not isinstance(module, tuple(force_leaf_modules))
    return big_enough and not isinstance(module, tuple(exclude_wrap_modules))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs) -> nn.Module:
    # a module may carry its own wrapper arguments (`_wrap_overrides`), which win
    overrides = getattr(module, "_wrap_overrides", None)
    if overrides:
        kwargs = {**kwargs, **overrides}
    return wrapper_cls(module, **kwargs)


def recursive_wrap(module: nn.Module, auto_wrap_policy: Callable, wrapper_cls: Callable,
                   ignored_modules: Set[nn.Module], ignored_params: Set[nn.Parameter],
                   only_wrap_children: bool = False, **kwargs: Any) -> Tuple[nn.Module, int]:
    """Wrap the submodules of `module` that `auto_wrap_policy` selects with
    `wrapper_cls(submodule, **kwargs)`, deepest first; `module` itself too unless
    `only_wrap_children`. Modules in `ignored_modules` and parameters in
    `ignored_params` are left alone. Returns (the possibly wrapped module, the
    number of parameters now inside wrappers)."""
    if auto_wrap_policy is None or wrapper_cls is None:
        raise ValueError("recursive_wrap needs both auto_wrap_policy and wrapper_cls")
    if isinstance(wrapper_cls, type):
        for name, sub in module.named_modules():
            if sub not in ignored_modules and isinstance(sub, wrapper_cls):
                raise ValueError(f"recursive_wrap: {name or 'the module'} is already a {wrapper_cls.__name__}; "
                                 "auto-wrapping cannot wrap a module twice")
    total = sum(p.numel() for p in module.parameters() if p not in ignored_params)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=total):
        return module, 0
    wrapped = 0
    for name, child in list(module.named_children()):
        if child in ignored_modules:
            continue
        new_child, n = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules, ignored_params,
                                      **kwargs)
        if new_child is not child:
            setattr(module, name, new_child)
        wrapped += n
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False,
                                                   unwrapped_params=total - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), total
    return module, wrapped
