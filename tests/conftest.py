import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "models"))

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_xla  # noqa: E402,F401


@pytest.fixture
def dev():
    return torch_xla.device()


@pytest.fixture(autouse=True)
def _clean_metrics():
    import torch_xla.debug.metrics as met
    import torch_xla.core.xla_model as xm
    xm.mark_step()
    met.clear_all()
    yield
