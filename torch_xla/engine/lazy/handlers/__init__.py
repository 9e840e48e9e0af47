"""Tensor-level handlers: aten ops answered above the lowering rules because
they touch host state or tensors, not only values.

  random.py          the device generator (a host seed fed as a scalar leaf) and random ops
  data_dependent.py  nonzero, x[mask], masked_select, unique: read what decides the shape
  batch_norm.py      batch norm with in-place running statistics
  misc.py            _linalg_check_errors, prims.copy_to
"""
from . import random, data_dependent, batch_norm, misc  # noqa: F401
