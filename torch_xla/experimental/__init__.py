"""torch_xla.experimental: eager mode and other opt-in behaviours."""
from .eager import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401


def compile(*args, **kwargs):  # noqa: A001
    """torch_xla 2.4-2.5 spelled torch_xla.compile so; same function."""
    import torch_xla
    return torch_xla.compile(*args, **kwargs)
