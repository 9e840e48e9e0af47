"""torch_xla.experimental: eager mode and other opt-in behaviours."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401
