"""torch_xla.experimental.scan_layers: a stack of identical layers as one loop.

The layers' parameters and buffers are stacked along a new leading dimension
and one layer's forward (the first module, called with each layer's weights
through `torch.func.functional_call`) becomes the body of one `scan` node, so
the compiled program holds one layer however deep the stack is. Gradients flow
back through the stacking to every layer's own parameters.
"""
import torch
from torch.func import functional_call

from .scan import scan

__all__ = ["scan_layers"]

# one-layer functions of layers declared pure, by (id(partition_fn), id(first layer))
_ONE_LAYER_CACHE = {}


def _weights(layer):
    return (dict(layer.named_parameters()), dict(layer.named_buffers()))


def _same_structure(dicts, what):
    first = dicts[0]
    for d in dicts[1:]:
        if list(d.keys()) != list(first.keys()):
            raise ValueError(f"scan_layers: layers have mismatched keys in their {what}: "
                             f"{list(first)} vs {list(d)}")
        for k in first:
            if first[k].shape != d[k].shape or first[k].dtype != d[k].dtype:
                raise ValueError(f"scan_layers: Shape mismatch: {what} {k!r} differs between layers: "
                                 f"{tuple(first[k].shape)} {first[k].dtype} vs "
                                 f"{tuple(d[k].shape)} {d[k].dtype}")


def _one_layer_fn(first, partition_fn, is_layer_pure):
    key = (id(partition_fn), id(first))
    if is_layer_pure and key in _ONE_LAYER_CACHE:
        return _ONE_LAYER_CACHE[key]

    def one_layer(carry, weights):
        params, buffers = weights
        # a tuple carry is the layer's positional arguments (as upstream)
        args = carry if isinstance(carry, tuple) else (carry,)
        return functional_call(first, {**params, **buffers}, args), None

    if is_layer_pure:
        _ONE_LAYER_CACHE[key] = one_layer
    return one_layer


def scan_layers(layers, input_data, partition_fn=None, is_layer_pure=False):
    """Run `layers` one after the other from `input_data`, as
    `torch.nn.Sequential(*layers)(input_data)` would, with one loop body.

    Every layer must have the same structure (parameter names, shapes, dtypes)
    and compute the same function of its weights. `partition_fn` chooses what
    the backward keeps (a rematerializing partitioner keeps only each layer's
    input) and `is_layer_pure` lets the traced layer be reused (see `scan`)."""
    layers = list(layers)
    if not layers:
        return input_data
    pb = [_weights(layer) for layer in layers]
    _same_structure([p for p, _ in pb], "parameters")
    _same_structure([b for _, b in pb], "buffers")
    first = layers[0]
    one_layer = _one_layer_fn(first, partition_fn, is_layer_pure)
    stacked_params = {k: torch.stack([p[k] for p, _ in pb]) for k in pb[0][0]}
    stacked_buffers = {k: torch.stack([b[k] for _, b in pb]) for k in pb[0][1]}

    final, _ = scan(one_layer, input_data, (stacked_params, stacked_buffers),
                    partition_fn=partition_fn, is_fn_pure=is_layer_pure)
    return final
