"""Sharding annotations as operators, so a function that torch.compile or
AOTAutograd captures keeps them in its graphs (upstream registers them when
torch_xla is imported, as here):

    torch.ops.xla.dynamo_mark_sharding(t, device_ids, mesh_shape, axis_names, partition_spec)
        annotates t in place (mark_sharding) and returns it
    torch.ops.xla.aot_mark_sharding(t, str(mesh), str(partition_spec))
        a new tensor: t's value under the sharding (MarkShardingFunction's op)

`axis_names` and `partition_spec` are the Python literals' text (`str(mesh.axis_names)`,
`'(1, 0)'`), since an operator's schema has no tuple of names or of optional ints.
On a CPU tensor the first returns t, the second a copy.
"""
import ast

import torch

from ..engine import api as _api

_LIB = []


def _literal(text, what):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"dynamo_mark_sharding: {what} must be a Python literal, got {text!r}") from None


def _mark(t, device_ids, mesh_shape, axis_names, partition_spec):
    import torch_xla.distributed.spmd as xs
    mesh = xs.Mesh(list(device_ids), tuple(mesh_shape), _literal(axis_names, "axis_names"))
    xs.mark_sharding(t, mesh, _literal(partition_spec, "partition_spec"))
    return t


def _elsewhere(t, device_ids, mesh_shape, axis_names, partition_spec):
    return t


def _constrained(t, mesh, partition_spec):
    import torch_xla.distributed.spmd as xs
    m = xs.Mesh.from_str(mesh)
    if m is None:
        raise ValueError(f"aot_mark_sharding: {mesh!r} does not describe a mesh (str(Mesh) does)")
    spec = tuple(_literal(partition_spec, "partition_spec"))
    return _api.sharding_constraint(t, m._named_sharding(spec))


def register():
    if _LIB:
        return
    lib = torch.library.Library("xla", "FRAGMENT")
    _LIB.append(lib)
    lib.define("dynamo_mark_sharding(Tensor input, int[] device_ids, int[] mesh_shape, str axis_names, "
               "str partition_spec) -> Tensor")
    lib.impl("dynamo_mark_sharding", _mark, "PrivateUse1")
    lib.impl("dynamo_mark_sharding", _elsewhere, "CompositeExplicitAutograd")
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake("xla::dynamo_mark_sharding",
                                    lambda t, *args: torch.empty_like(t), lib=lib)
    lib.define("aot_mark_sharding(Tensor t, str mesh, str partition_spec) -> Tensor")
    lib.impl("aot_mark_sharding", _constrained, "PrivateUse1")
    lib.impl("aot_mark_sharding", lambda t, mesh, spec: t.clone(), "CompositeExplicitAutograd")
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake("xla::aot_mark_sharding", lambda t, mesh, spec: torch.empty_like(t), lib=lib)
    # XLA tensors dispatch in Python: the same kernels as dispatch handlers
    _api.register_op_handler(torch.ops.xla.dynamo_mark_sharding.default, _mark)
    _api.register_op_handler(torch.ops.xla.aot_mark_sharding.default, _constrained)


register()
