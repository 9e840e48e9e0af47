"""torch_xla.backends: switches of the XLA backend, in the manner of torch.backends.

`set_mat_mul_precision(p)` / `get_mat_mul_precision()`: the precision of float32
matrix multiplications and convolutions in graphs compiled afterwards: 'default'
(fastest; on TPU one bf16 pass), 'high' (about 14 bits, three passes) or
'highest' (about 22 bits, six passes). On the CPU they always run in float32.
"""
import logging

import torch_xla

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

logger = logging.getLogger(__name__)

# logged on every change: graphs already compiled keep the precision they were built with
_WARNING_MESSAGE = ("Setting mat mul precision multiple times is not recommended. If you need to do so, "
                    "please empirically verify that the precision setting is behaving as expected.")

_PRECISIONS = ("default", "high", "highest")


def set_mat_mul_precision(precision):
    """Set the precision of float32 matmuls and convolutions ('default', 'high',
    'highest'); anything else raises ValueError."""
    if precision not in _PRECISIONS:
        raise ValueError(f"Invalid mat mul precision {precision!r}: expected one of {', '.join(_PRECISIONS)}")
    logger.warning(_WARNING_MESSAGE)
    torch_xla._XLAC._xla_set_mat_mul_precision(precision)


def get_mat_mul_precision():
    """The current precision: 'default', 'high' or 'highest'."""
    return torch_xla._XLAC._xla_get_mat_mul_precision()
