"""Export a `torch.export.ExportedProgram` to StableHLO.

`exported_program_to_stablehlo(ep)` gives a `StableHLOGraphModule`: calling it runs
the program's graph on the XLA device (lazily, one cached XLA graph per input
signature), and `get_stablehlo_text()` / `get_stablehlo_bytecode()` give the
StableHLO module XLA compiles for the program's example inputs (or
`StableHLOExportOptions.override_tracing_arguments`).

How it is built here: the program's graph module is run on XLA tensors and the
StableHLO is taken from the lazy graph of its outputs (`_XLAC._get_stablehlo`).
Weights are graph inputs of that module, not inlined constants.

`save_as_stablehlo` / `StableHLOGraphModule.save` write a folder with
`functions/<name>.mlir` (text), `functions/<name>.mlir.bc` (bytecode),
`functions/<name>.meta.json` and the exported program itself (`program.pt2`,
`torch.export.save`); `load` reads such a folder back. This folder layout is this
package's own: it is not upstream's bundle format (weights as numpy files).
"""
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Set, Tuple

import torch
from torch.utils import _pytree as pytree

__all__ = [
    "StableHLOExportOptions", "StableHLOGraphModule", "exported_program_to_stablehlo",
    "save_as_stablehlo", "load", "save_torch_model_as_stablehlo",
]


@dataclass
class StableHLOExportOptions:
    include_human_readable_text: bool = True
    override_tracing_arguments: Optional[Tuple[Any]] = None
    override_tracing_kwargs: Optional[Mapping[str, Any]] = None
    save_weights: bool = True
    inline_all_constant: bool = True
    export_weights: bool = True
    custom_ops_allowed_in_graph: Set[str] = field(default_factory=set)
    export_node_metadata: bool = False


def _xla():
    import torch_xla
    return torch_xla.device()


def _to_xla(tree):
    dev = _xla()
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(dev), tree)


def _flat_tensors(tree):
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _signature(t):
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}


class _DeviceInterpreter(torch.fx.Interpreter):
    """Runs an exported graph with every `device=` keyword pointed at the XLA
    device (export records the CPU for factory ops traced on CPU inputs)."""

    def __init__(self, module, device):
        super().__init__(module)
        self._device = device

    def call_function(self, target, args, kwargs):
        if "device" in kwargs:
            kwargs = dict(kwargs, device=self._device)
        return super().call_function(target, args, kwargs)


class StableHLOGraphModule:
    """A program exported to StableHLO; callable like the original module."""

    def __init__(self, exported_program, options=None):
        self._ep = exported_program
        self._options = options or StableHLOExportOptions()
        self._weights = None
        self._text = {}
        self._bytecode = {}
        self._meta = {}

    # -- running -----------------------------------------------------------------
    def _run(self, args, kwargs):
        """The program's graph on XLA tensors: weights (moved once) and the user's
        inputs as flat graph inputs; factory ops' `device=` is the XLA device."""
        ep = self._ep
        flat = list(ep._graph_module_flat_inputs(tuple(args), dict(kwargs)))
        weights = self._weights_cache(flat)
        inputs = list(weights) + [_to_xla(x) for x in flat[len(weights):]]
        outs = _DeviceInterpreter(ep.graph_module, _xla()).run(*inputs, enable_io_processing=False)
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        from torch.export.graph_signature import OutputKind
        user = [o for o, spec in zip(outs, ep.graph_signature.output_specs)
                if spec.kind == OutputKind.USER_OUTPUT]
        return pytree.tree_unflatten(user, ep.call_spec.out_spec)

    def _weights_cache(self, flat):
        if self._weights is None:
            n_extra = sum(1 for spec in self._ep.graph_signature.input_specs
                          if spec.kind.name != "USER_INPUT")
            self._weights = [_to_xla(x) for x in flat[:n_extra]]
        return self._weights

    def __call__(self, *args, **kwargs):
        return self._run(args, kwargs)

    def evaluate(self, method_name, args):
        if method_name not in (None, "forward"):
            raise KeyError(f"StableHLOGraphModule: no method {method_name!r} (only 'forward')")
        return self(*args)

    # -- StableHLO ---------------------------------------------------------------
    def _tracing_inputs(self):
        opts = self._options
        if opts.override_tracing_arguments is not None:
            args = tuple(opts.override_tracing_arguments)
            kwargs = dict(opts.override_tracing_kwargs or {})
        else:
            args, kwargs = self._ep.example_inputs or ((), {})
        return args, kwargs

    def _lower(self, method_name):
        if method_name not in (None, "forward"):
            raise KeyError(f"StableHLOGraphModule: no method {method_name!r} (only 'forward')")
        if "forward" in self._text:
            return
        import torch_xla
        from torch_xla import _XLAC
        torch_xla.sync()
        args, kwargs = self._tracing_inputs()
        outs = self(*args, **kwargs)
        flat = _flat_tensors(outs)
        if not flat:
            raise ValueError("StableHLOGraphModule: the program returns no tensor")
        self._text["forward"] = _XLAC._get_stablehlo(flat)
        self._bytecode["forward"] = _XLAC._get_stablehlo(flat, emit_bytecode=True)
        self._meta["forward"] = {
            "name": "forward",
            "input_signature": [_signature(t) for t in _flat_tensors((args, kwargs))],
            "output_signature": [_signature(t) for t in flat],
        }
        torch_xla.sync()

    def get_stablehlo_text(self, method_name=None):
        self._lower(method_name)
        return self._text["forward"]

    def get_stablehlo_bytecode(self, method_name=None):
        self._lower(method_name)
        return self._bytecode["forward"]

    # -- files -------------------------------------------------------------------
    def save(self, directory_path):
        self._lower(None)
        fdir = os.path.join(directory_path, "functions")
        os.makedirs(fdir, exist_ok=True)
        for name, text in self._text.items():
            if self._options.include_human_readable_text:
                with open(os.path.join(fdir, name + ".mlir"), "w") as f:
                    f.write(text)
            with open(os.path.join(fdir, name + ".mlir.bc"), "wb") as f:
                f.write(self._bytecode[name])
            with open(os.path.join(fdir, name + ".meta.json"), "w") as f:
                json.dump(self._meta[name], f, indent=1)
        torch.export.save(self._ep, os.path.join(directory_path, "program.pt2"))
        with open(os.path.join(directory_path, "options.json"), "w") as f:
            opts = {k: v for k, v in dataclasses.asdict(self._options).items()
                    if isinstance(v, (bool, int, str, type(None)))}
            json.dump(opts, f)

    @classmethod
    def load(cls, directory_path):
        ep = torch.export.load(os.path.join(directory_path, "program.pt2"))
        opts = StableHLOExportOptions()
        p = os.path.join(directory_path, "options.json")
        if os.path.exists(p):
            with open(p) as f:
                for k, v in json.load(f).items():
                    if hasattr(opts, k):
                        setattr(opts, k, v)
        return cls(ep, opts)


def exported_program_to_stablehlo(exported_model, options=None):
    """StableHLOGraphModule of a `torch.export.ExportedProgram`."""
    if not isinstance(exported_model, torch.export.ExportedProgram):
        raise TypeError("exported_program_to_stablehlo: expected a torch.export.ExportedProgram, "
                        f"got {type(exported_model).__name__}")
    return StableHLOGraphModule(exported_model, options)


def save_as_stablehlo(exported_model, stablehlo_dir, options=None):
    """Export `exported_model` and write it to `stablehlo_dir` (see the module doc)."""
    if isinstance(exported_model, StableHLOGraphModule):
        shlo = exported_model
    else:
        shlo = exported_program_to_stablehlo(exported_model, options)
    shlo.save(stablehlo_dir)
    return shlo


def save_torch_model_as_stablehlo(torchmodel, args, path, options=None):
    """torch.export the module with `args`, then `save_as_stablehlo`."""
    ep = torch.export.export(torchmodel, tuple(args))
    return save_as_stablehlo(ep, path, options)


def load(directory_path):
    """A StableHLOGraphModule from a folder written by `save_as_stablehlo`."""
    return StableHLOGraphModule.load(directory_path)
