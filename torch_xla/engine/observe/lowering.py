"""Upstream's Python `LoweringContext` (`torch_xla._XLAC.lowering`): the graph
computing some tensors lowered to an HloModuleProto, and which tensors feed
its parameters. Nothing runs and no tensor changes.

Parameters are the graph's device-data inputs in first-use order, then one per
scalar pool (the scalars a graph is fed, by dtype), as the executor feeds them.
"""
from ..ir.node import data_node
from ..lazy import executor
from ..lazy.state import value_of
from ..lazy.tensor import new_base
from ..lazy.transfers import upload_array
from . import graph_dump, hlo_proto


class ModuleLowering:
    """One lowering context: `build(tensors)`, then the module and its parameters."""

    def __init__(self, name="PyLoweringContext"):
        self.name = str(name)
        self._proto = None
        self._params = ()   # data leaves, parameter i is params[i]
        self._pools = ()    # numpy arrays, parameters len(params) + j

    def build(self, tensors):
        values = executor.pending_roots(list(tensors))
        self._proto, g = graph_dump.module_proto(values, self.name)
        self._params = tuple(g.params)
        self._pools = tuple(g.pool_arrays())

    def _built(self, what):
        if self._proto is None:
            raise RuntimeError(f"LoweringContext.{what}: nothing was built yet (call build(tensors) first)")
        return self._proto

    def hlo(self):
        return self._built("hlo")

    def hlo_text(self):
        return hlo_proto.to_text(self._built("hlo_text"))

    def hlo_json(self):
        return hlo_proto.to_json(self._built("hlo_json"))

    def _device_tensors(self):
        out = {}
        for i, p in enumerate(self._params):
            if p.data is None:
                raise RuntimeError(f"LoweringContext: parameter {i} ({graph_dump.xla_shape(*p.entry)}) is a "
                                   "placeholder tensor: it has no data")
            out[i] = new_base((p, 0), p.entry)
        return out

    def device_parameter_id_tensor_mapping(self):
        """{parameter id: an XLA tensor over that parameter's device data}; no
        data moves to the host (scalar pools are uploaded)."""
        import torch
        self._built("device_parameter_id_tensor_mapping")
        out = self._device_tensors()
        for j, pool in enumerate(self._pools):
            cpu = torch.from_numpy(pool.copy())
            arr = upload_array(cpu)
            aval = (tuple(cpu.shape), cpu.dtype)
            out[len(self._params) + j] = new_base((data_node(arr, *aval), 0), aval)
        return out

    def parameter_id_tensor_mapping(self):
        """{parameter id: a CPU tensor holding that parameter's value} (read
        from the device)."""
        import torch
        self._built("parameter_id_tensor_mapping")
        out = {i: t.cpu() for i, t in self._device_tensors().items()}
        for j, pool in enumerate(self._pools):
            out[len(self._params) + j] = torch.from_numpy(pool.copy())
        return out

    def tensor_parameter_id(self, t):
        """The parameter tensor t's device data feeds, -1 when t holds pending
        IR or data the module does not read."""
        node = value_of(t)[0]
        for i, p in enumerate(self._params):
            if p is node or (p.data is not None and p.data is node.data):
                return i
        return -1
