"""IR nodes.

A node is an op applied to operand values; a value is the tuple (node, output
index). Leaves are device data (a jax.Array, hashed by shape and dtype only, so
new parameter values never change a graph's hash) and scalars (a Python number
fed to the graph through a per-dtype pool, hashed by dtype only, so a changing
learning rate never recompiles).

A node's hash is computed once, when it is made, from its op entry's static
hash and its operands' hashes. Two data leaves of the same shape hash alike;
the executor tells them apart by position when it hashes a whole graph.
"""
import weakref

from ..base import config, frames
from ..runtime.topology import _spmd

DATA = 0      # device data leaf
SCALAR = 1    # Python scalar leaf
OP = 2        # an op


class Node:
    # `result` (DATA, SPMD mode only) is set on a program's outputs by result_node:
    # left unset otherwise, so making a node costs nothing more; read it with getattr
    __slots__ = ("kind", "entry", "operands", "hash", "data", "exclusive", "result", "__weakref__")

    def __init__(self, kind, entry, operands, h, data=None):
        self.kind = kind
        self.entry = entry        # OpEntry for OP nodes; aval (shape, dtype) for leaves
        self.operands = operands  # tuple of values
        self.hash = h
        self.data = data          # jax.Array (DATA) or Python number (SCALAR)
        self.exclusive = True     # DATA: held by one tensor only (donation is safe)

    def __repr__(self):
        if self.kind == DATA:
            return f"Data{self.entry}"
        if self.kind == SCALAR:
            return f"Scalar({self.data!r})"
        return f"Node({self.entry.name})"


_data_hash_cache = {}
_sharding_keys = {}


def sharding_key(array):
    """How `array` is laid out over the devices, as a hashable value (None for one
    device): its tile assignment in XLA's terms, so that equal layouts spelled by
    different JAX sharding classes key alike."""
    s = getattr(array, "sharding", None)
    if s is None:
        return None
    ndim = len(array.shape)
    try:
        k = _sharding_keys.get((s, ndim))   # one sharding spells different layouts by rank
    except TypeError:
        return None
    if k is None:
        devs = s._device_assignment
        if len(devs) == 1:
            k = ()
        else:
            h = s._to_xla_hlo_sharding(ndim)
            k = (tuple(d.id for d in devs), str(h))
        if len(_sharding_keys) > 4096:
            _sharding_keys.clear()
        _sharding_keys[(s, ndim)] = k
    return k or None


def _leaf_hash(key, array):
    if _spmd[0]:
        sk = sharding_key(array)
        if sk is not None:
            hk = key + (sk,)
            h = _data_hash_cache.get(hk)
            if h is None:
                h = _data_hash_cache[hk] = hash(("data",) + hk)
            return h
    h = _data_hash_cache.get(key)
    if h is None:
        h = _data_hash_cache[key] = hash(("data",) + key)
    return h


def data_node(array, shape, dtype):
    """A leaf holding device data with torch shape/dtype (shape: tuple, dtype: torch.dtype).
    In SPMD mode the array's sharding is part of the leaf's hash (so of the graph key)."""
    key = (shape, dtype)
    return Node(DATA, key, (), _leaf_hash(key, array), array)


class _Layout:
    """What sharding_key reads of an array: its shape and sharding."""
    __slots__ = ("shape", "sharding")

    def __init__(self, shape, sharding):
        self.shape = shape
        self.sharding = sharding


_layouts = weakref.WeakKeyDictionary()   # placeholder leaf -> the sharding it was laid out with


def placeholder_node(shape, dtype, sharding):
    """A leaf with no data (a placeholder) laid out as `sharding` over the SPMD
    devices: it compiles as an input of that layout (`layout_of`) and the layout
    is part of its hash, as for device data."""
    key = (shape, dtype)
    node = Node(DATA, key, (), _leaf_hash(key, _Layout(shape, sharding)), None)
    _layouts[node] = sharding
    return node


def layout_of(node):
    """The sharding a placeholder leaf was laid out with (placeholder_node), or None."""
    return _layouts.get(node)


def result_node(array, shape, dtype):
    """A data leaf holding a program's output. In SPMD mode it is marked as one
    (`result`): a value the logical device computed is replicated over it, as
    upstream's outputs are, even where it ran on one device (see
    handlers/sharding.spec_string); an upload is not."""
    node = data_node(array, shape, dtype)
    if _spmd[0]:
        node.result = True
    return node


_scalar_cache = {}
_POOL_OF = {float: "float64", int: "int64", bool: "bool", complex: "complex128"}


def scalar_value(v, pool=None):
    """The cached leaf value for scalar v; `pool` names the numpy dtype it is fed
    in (default: float64/int64/bool/complex128 from v's Python type)."""
    if pool is None:
        pool = _POOL_OF[type(v)]
    key = (pool, type(v), v)
    val = _scalar_cache.get(key)
    if val is None:
        if len(_scalar_cache) > 4096:
            _scalar_cache.clear()
        val = _scalar_cache[key] = (Node(SCALAR, pool, (), hash(("scalar", pool)), v), 0)
    return val


# With XLA_IR_DEBUG / XLA_HLO_DEBUG / PT_XLA_DEBUG_LEVEL>=1, op nodes remember the
# user's line (`src`, for IR dumps, HLO scopes and recompilation explanations);
# otherwise Node stays as it is and tracing pays nothing.
if config.records_sources():
    _PlainNode = Node

    class Node(_PlainNode):  # noqa: F811
        __slots__ = ("src", "scope")

        def __init__(self, kind, entry, operands, h, data=None):
            _PlainNode.__init__(self, kind, entry, operands, h, data)
            # ops and uploads (not scalar constants): where, and in which xp.Trace scope
            self.src = frames.user_src(2) if kind != SCALAR else None
            self.scope = frames.current_scope() if kind != SCALAR else None
