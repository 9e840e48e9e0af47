"""torch.ops.xla.dynamo_mark_sharding: mark_sharding as an operator, so a function
that torch.compile captures keeps the annotation in its graph (upstream registers
it when torch_xla is imported, as here).

    torch.ops.xla.dynamo_mark_sharding(t, device_ids, mesh_shape, axis_names, partition_spec)

`axis_names` and `partition_spec` are the Python literals' text (`str(mesh.axis_names)`,
`'(1, 0)'`), since an operator's schema has no tuple of names or of optional ints.
On an XLA tensor it annotates t in place and returns t; elsewhere it returns t.
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
    # XLA tensors dispatch in Python: the same kernel as a dispatch handler
    _api.register_op_handler(torch.ops.xla.dynamo_mark_sharding.default, _mark)


register()
