"""torch_xla.amp: automatic mixed precision on the XLA device.

`autocast(device, ...)` is torch.autocast for "xla": bfloat16 on TPU and CPU,
float16 on CUDA unless `dtype` says otherwise (see engine/autocast.py for the op
policy). `GradScaler` scales float16 losses on any platform and never reads
`found_inf` on the host when the optimizer can take it as a device tensor
(`torch_xla.amp.syncfree` optimizers, `fused=True` torch optimizers).
`syncfree` holds SGD/Adam/AdamW whose `step(found_inf=...)` masks the update
in the graph."""
from .autocast_mode import autocast  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401
from . import syncfree  # noqa: F401
