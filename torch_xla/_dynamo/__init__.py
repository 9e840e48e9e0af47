"""TorchDynamo support: `torch.compile(model, backend="openxla")` (training,
through AOTAutograd) and `backend="openxla_eval"` (inference). torch's own
backends call `torch_xla.core.dynamo_bridge.extract_compiled_graph`."""
from . import config  # noqa: F401
