"""Upstream's import path for the dynamo bridge (torch's openxla backends use it)."""
from torch_xla._dynamo.dynamo_bridge import *  # noqa: F401,F403
from torch_xla._dynamo.dynamo_bridge import CompiledGraph, extract_compiled_graph, is_xla_tensor  # noqa: F401
