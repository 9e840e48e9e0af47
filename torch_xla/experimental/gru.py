"""`GRU`: torch_xla's `torch.nn.GRU`, whose recurrence on the XLA device is one
`scan` (one XLA while loop) per layer instead of one cell per time step, so a
long sequence compiles as fast as a short one.

The parameters, their names and shapes, the arguments and the results are
torch's: a state dict moves between the two classes unchanged. On CPU (or any
non-XLA) tensors, for packed sequences and for projections, the forward is
torch's own. Only unidirectional GRUs are taken: `GRU(..., bidirectional=True)`
builds a plain `torch.nn.GRU`.

`import torch_xla` makes `torch.nn.GRU` this class, as upstream does
(`torch_xla._patched_functions`); the original stays `torch.nn.GRU._orig`."""
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence

_TorchGRU = nn.GRU if not hasattr(nn.GRU, "_orig") else nn.GRU._orig


def _layer(gates_in, h0, w_hh, b_hh):
    """One layer's recurrence over time: gates_in (seq, batch, 3H) holds the input
    projections of every step, computed at once outside the loop."""
    from .scan import scan

    def step(h, gi):
        gh = F.linear(h, w_hh, b_hh)
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        h = n + z * (h - n)  # (1 - z) * n + z * h
        return h, h

    return scan(step, h0, gates_in)


class GRU(_TorchGRU):
    _orig = None

    def __new__(cls, *args, **kwargs):
        if kwargs.get("bidirectional", False) or (len(args) >= 7 and args[6]):
            logging.warning("torch_xla GRU supports unidirectional GRUs only; "
                            "bidirectional=True uses torch.nn.GRU.")
            return _TorchGRU(*args, **kwargs)
        return super().__new__(cls)

    def forward(self, input, hx=None):
        if (isinstance(input, PackedSequence) or input.device.type != "xla"
                or self.bidirectional or getattr(self, "proj_size", 0)):
            return super().forward(input, hx)
        if input.dim() not in (2, 3):
            raise ValueError(f"GRU: Expected input to be 2D or 3D, got {input.dim()}D instead")
        batched = input.dim() == 3
        if not batched:
            input = input.unsqueeze(1)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(
                        f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        if hx is None:
            hx = torch.zeros(self.num_layers, input.shape[1], self.hidden_size,
                             dtype=input.dtype, device=input.device)
        layer_in, finals = input, []
        for k in range(self.num_layers):
            b_ih = getattr(self, f"bias_ih_l{k}") if self.bias else None
            b_hh = getattr(self, f"bias_hh_l{k}") if self.bias else None
            gates_in = F.linear(layer_in, getattr(self, f"weight_ih_l{k}"), b_ih)
            h_last, layer_in = _layer(gates_in, hx[k], getattr(self, f"weight_hh_l{k}"), b_hh)
            finals.append(h_last)
            if self.dropout and self.training and k < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, training=True)
        output, h_n = layer_in, torch.stack(finals)
        if not batched:
            return output.squeeze(1), h_n.squeeze(1)
        if self.batch_first:
            output = output.transpose(0, 1)
        return output, h_n


def patch_nn_gru():
    """Make `torch.nn.GRU` this module's GRU (idempotent); the original class
    stays reachable as `torch.nn.GRU._orig`."""
    if nn.GRU is not GRU:
        GRU._orig = _TorchGRU
        nn.GRU = GRU
    return GRU
