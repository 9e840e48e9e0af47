"""Tensor-level handlers: aten ops answered above the lowering rules because
they touch host state or tensors, not only values.

  random.py          the device generator (a host seed fed as a scalar leaf) and random ops
  data_dependent.py  nonzero, x[mask], masked_select, unique: read what decides the shape
  batch_norm.py      batch norm with in-place running statistics
  misc.py            _linalg_check_errors, prims.copy_to
  optim.py           fused optimizers (_fused_adam(w)_, _fused_sgd_) and GradScaler's kernels

Each is imported here: a handler module that loaded only when some other
feature imported it left its ops on the CPU fallback in every other process
(AdamW(fused=True), the Trainer's default, synced the host once per parameter).
"""
from . import random, data_dependent, batch_norm, misc, optim  # noqa: F401
