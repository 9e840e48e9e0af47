"""Explicit buffer donors (upstream's `_set_buffer_donation`).

A tensor holding device data can be marked as a donor: the next graph that
reads it may reuse its buffer for an output, and the tensor's buffer is gone
afterwards (reading it is an error). The mark belongs to the buffer (its data
node), so a tensor written in place by that graph holds a new, unmarked
buffer. The lazy executor and the Dynamo bridge donate marked inputs; the
graph hash includes the marks only while `enabled` (upstream's
alias_with_buffer_donor_config).

Parameters a step overwrites are donated without any mark (executor.py); this
module is only for the explicit requests.
"""
import weakref

import torch

from ..base import metrics
from ..ir import node as ir
from ..ops import registry
from .state import whole_base
from .tensor import new_base

_marked = weakref.WeakSet()   # data nodes whose buffer may be donated
_gone = weakref.WeakSet()     # data nodes whose buffer a graph consumed
_enabled = [False]


def _data_node(t, live=True):
    base = whole_base(t)
    if base is None:
        return None
    node = base.value[0]
    return node if node.kind == ir.DATA and (node.data is not None or not live) else None


_requests = [None]   # while a capture logs: [(placeholder data node, should_donate)]


def log_requests(on):
    """Start (True) or stop (False; -> the log) recording marks asked of tensors
    with no data (a captured function's placeholders): the caller applies them
    to the real arguments."""
    out = _requests[0] or []
    _requests[0] = [] if on else None
    return out


def set_donation(t, should_donate):
    """Mark (or unmark) t's buffer; False when t holds no buffer (pending IR, a view)."""
    node = _data_node(t)
    if node is None:
        log = _requests[0]
        if log is not None:
            ph = _data_node(t, live=False)
            if ph is not None and not is_consumed(ph):
                log.append((ph, bool(should_donate)))
        return False
    if should_donate:
        _marked.add(node)
    else:
        _marked.discard(node)
    metrics.counter("XlaSetBufferDonation")
    return True


def donor_copy(t):
    """A new tensor holding a copy of t's buffer, marked as a donor (t keeps its
    own); None when t holds no buffer."""
    node = _data_node(t)
    if node is None:
        return None
    copy = new_base((ir.data_node(node.data.copy(), *node.entry), 0), node.entry)
    _marked.add(copy._lazy.value[0])
    return copy


def get_donation(t):
    """Whether t's buffer is marked (still true once a graph consumed it)."""
    node = _data_node(t, live=False)
    return node is not None and node in _marked


def is_marked(node):
    return node in _marked


def consumed(node):
    """Record that node's buffer was donated to an executed graph."""
    node.data = None
    _gone.add(node)


def is_consumed(node):
    return node in _gone


def set_enabled(flag):
    _enabled[0] = bool(flag)


def enabled():
    return _enabled[0]


def marked_params(graph):
    """Indices of graph's parameters whose buffers are marked donors."""
    if not _marked:
        return []
    return [i for i, p in enumerate(graph.params) if p in _marked]


_lib = []


def register_op():
    """torch.ops.xla.dynamo_set_buffer_donor_(t, should_donate) -> t: marks an XLA
    tensor's buffer from inside a function Dynamo compiles (the graph keeps the
    call, so the bridge's trace marks the real tensor); a no-op elsewhere."""
    if _lib:
        return
    lib = torch.library.Library("xla", "FRAGMENT")
    lib.define("dynamo_set_buffer_donor_(Tensor t, bool should_donate) -> Tensor")

    def on_xla(t, should_donate):
        set_donation(t, should_donate)
        return t

    def elsewhere(t, should_donate):
        return t

    def fake(t, should_donate):   # Dynamo's and AOTAutograd's traces: nothing to mark
        return t

    lib.impl("dynamo_set_buffer_donor_", on_xla, "PrivateUse1")
    lib.impl("dynamo_set_buffer_donor_", elsewhere, "CompositeExplicitAutograd")
    _lib.append(lib)
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake("xla::dynamo_set_buffer_donor_", fake, lib=lib)
    # XLA tensors dispatch in Python: the same kernel as a dispatch handler
    registry.HANDLERS[torch.ops.xla.dynamo_set_buffer_donor_.default] = lambda args, kwargs: on_xla(*args, **kwargs)
