"""torch_xla.utils.buffer_donor_context."""
import contextlib


@contextlib.contextmanager
def alias_with_buffer_donor_config(should_alias=True):
    """Upstream: let graphs alias buffers explicitly marked as donors.

    Not available here: this torch_xla donates every parameter a step overwrites on its
    own, and has no per-buffer donor marks to switch on or off."""
    raise NotImplementedError(
        "alias_with_buffer_donor_config: explicit buffer donors are not supported; in-place "
        "updated parameters are donated automatically")
    yield  # pragma: no cover
