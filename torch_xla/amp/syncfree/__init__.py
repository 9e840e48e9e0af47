"""Optimizers whose `step(found_inf=t)` skips a step with non-finite gradients
without reading `t` on the host: the update is masked in the graph."""
from .adam import Adam  # noqa: F401
from .adamw import AdamW  # noqa: F401
from .sgd import SGD  # noqa: F401
