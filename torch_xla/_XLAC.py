"""Stand-in for upstream's C++ extension module: the private entry points
scripts and libraries call (graph dumps, sync helpers)."""


def _xla_sync_multi(tensors, devices=None, wait=True, sync_xla_data=True):
    from .engine.executor import sync
    sync(list(tensors), wait=wait)


def _xla_get_default_device():
    return "xla:0"


def _get_xla_tensor_dimension_size(t, dim):
    return t.shape[dim]
