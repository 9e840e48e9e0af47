"""torch_xla.utils.buffer_donor_context."""
import contextlib

import torch_xla


@contextlib.contextmanager
def alias_with_buffer_donor_config(should_alias=True):
    """Inside, graphs may reuse the buffers of tensors marked with
    `torch_xla._XLAC._set_buffer_donation(t, True)` for their outputs (those
    tensors' buffers are gone after the graph runs), and the graph hash counts
    the marks. Yields the previous setting, restored on exit."""
    saved = torch_xla._XLAC._xla_get_enable_alias_with_buffer_donor_config()
    torch_xla._XLAC._xla_set_enable_alias_with_buffer_donor_config(should_alias)
    try:
        yield saved
    finally:
        torch_xla._XLAC._xla_set_enable_alias_with_buffer_donor_config(saved)
