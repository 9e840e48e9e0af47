"""`GRU`: the torch_xla replacement for `torch.nn.GRU` (upstream builds it on
`scan`; here it is `torch.nn.GRU` itself, whose fused GRU op the XLA device
lowers directly, so results and gradients equal torch's).

Only unidirectional GRUs are taken: `GRU(..., bidirectional=True)` gives a plain
`torch.nn.GRU`.

Upstream replaces `torch.nn.GRU` with this class when torch_xla is imported.
This package does not do that by default; `patch_nn_gru()` does it (and sets
`torch.nn.GRU._orig` to the original class, as upstream does)."""
import logging

import torch.nn as nn

_TorchGRU = nn.GRU if not hasattr(nn.GRU, "_orig") else nn.GRU._orig


class GRU(_TorchGRU):
    _orig = None

    def __new__(cls, *args, **kwargs):
        if kwargs.get("bidirectional", False) or (len(args) >= 7 and args[6]):
            logging.warning("torch_xla GRU supports unidirectional GRUs only; "
                            "bidirectional=True uses torch.nn.GRU.")
            return _TorchGRU(*args, **kwargs)
        return super().__new__(cls)


def patch_nn_gru():
    """Make `torch.nn.GRU` this module's GRU (idempotent); the original class
    stays reachable as `torch.nn.GRU._orig`."""
    if nn.GRU is not GRU:
        GRU._orig = _TorchGRU
        nn.GRU = GRU
    return GRU
