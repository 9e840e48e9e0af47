"""A captured graph: the one place the IR is walked and keyed.

`Graph.capture(roots)` walks the IR below the root values once, in post-order,
and records what every consumer needs: the op nodes in execution order, the
device-data leaves (parameters) and scalar leaves in first-use order, and the
structural signature. Two graphs share an executable exactly when their keys
are equal: the key lists each node's hash and, for every operand, the position
of the node it reads and which output, so it depends on ops, static arguments
and input avals, never on input values. The list parses back unambiguously
(a leaf is `hash, -1`; an op `hash, n, position, output, ...` for its n
operands; the roots close it), so two different wirings never share a key.

The executor compiles and runs it, the persistent cache keys it by `digest`,
graph dumps render `nodes`, `_XLAC._get_graph_hash` prints `key`.
"""
import collections
import hashlib
import os

import numpy as np

from ..base.dtypes import TORCH_TO_JAX, settle
from ..ops.context import LoweringContext, lowering
from ..ops.op import apply_entry
from .node import DATA, OP, layout_of

_XLA_DTYPES = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "c64", "complex128": "c128",
    "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2",
}


def xla_shape(shape, dtype):
    """f32[2,3]{1,0} for a torch (shape, dtype) or numpy dtype. A torch dtype is
    spelled as its device storage type (bf16 for f32 under XLA_USE_BF16), as
    upstream's IR text shows what the device holds."""
    settle()
    dtype = TORCH_TO_JAX.get(dtype, dtype)
    name = str(dtype).replace("torch.", "")
    t = _XLA_DTYPES.get(name, name)
    dims = ",".join(str(d) for d in shape)
    if len(shape) == 0:
        return f"{t}[]"
    layout = ",".join(str(i) for i in range(len(shape) - 1, -1, -1))
    return f"{t}[{dims}]{{{layout}}}"


def op_name(entry):
    """Upstream-style op name: aten::add for aten overloads, xla::<name> for internal ops."""
    info = entry.info
    base = entry.name.split(".")[0]
    if info is not None and info.func is not None:
        return f"aten::{base}"
    return f"xla::{base}"


def op_scope(node):
    """'aten::op(file:line)': the named scope of an op in HLO metadata (XLA_HLO_DEBUG)."""
    src = getattr(node, "src", None)
    scope = op_name(node.entry)
    if src is not None:
        scope += f"({os.path.basename(src[1])}:{src[2]})"
    return scope


class Key:
    """A graph's structural key: equal keys, same executable. Its hash is
    computed once, so a graph run many times (a replayed step) is looked up at
    the cost of one dictionary probe."""
    __slots__ = ("sig", "h")

    def __init__(self, sig):
        self.sig = sig
        self.h = hash(sig)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return self is other or (type(other) is Key and self.h == other.h and self.sig == other.sig)

    def __repr__(self):
        return repr(self.sig)


class Graph:
    """The IR below `roots` (a list of (node, output index) values)."""
    __slots__ = ("roots", "order", "pos", "params", "scalars", "sig", "donated", "_key", "_nodes", "device")

    @classmethod
    def capture(cls, roots, device=0):
        """device: the index of the XLA device the graph runs on (xla:<device>)."""
        g = cls()
        g.device = device
        pos = {}
        order = []
        params = []
        scalars = []
        sig = []
        for rv in roots:
            root = rv[0]
            if id(root) in pos:
                continue
            if root.kind != OP:
                pos[id(root)] = len(pos)
                (params if root.kind == DATA else scalars).append(root)
                sig.append(root.hash)
                sig.append(-1)
                continue
            stack = [[root, 0]]
            while stack:
                top = stack[-1]
                node = top[0]
                operands = node.operands
                i = top[1]
                if i < len(operands):
                    top[1] = i + 1
                    child = operands[i][0]
                    if id(child) in pos:
                        continue
                    if child.kind == OP:
                        stack.append([child, 0])
                    else:
                        pos[id(child)] = len(pos)
                        (params if child.kind == DATA else scalars).append(child)
                        sig.append(child.hash)
                        sig.append(-1)
                else:
                    stack.pop()
                    pos[id(node)] = len(pos)
                    order.append(node)
                    sig.append(node.hash)
                    sig.append(len(operands))
                    for v in operands:
                        sig.append(pos[id(v[0])])
                        sig.append(v[1])
        for rv in roots:
            sig.append(pos[id(rv[0])])
            sig.append(rv[1])
        g.roots = roots
        g.order = order
        g.pos = pos
        g.params = params
        g.scalars = scalars
        g.sig = sig
        g.donated = ()
        g._key = None
        g._nodes = None
        return g

    # -- identity -------------------------------------------------------------

    def donate(self, donated):
        """Mark parameters (by index) whose buffers the executable may reuse;
        donation is part of the key."""
        self.donated = tuple(donated)
        self._key = None

    def permute_roots(self, perm):
        """Compute the roots in the order perm lists them (the same nodes and
        parameters; only the outputs' order, and so the key, changes)."""
        n = 2 * len(self.roots)   # each root is (position, output) at the end of sig
        tail = self.sig[len(self.sig) - n:]
        self.roots = [self.roots[i] for i in perm]
        self.sig[len(self.sig) - n:] = [x for i in perm for x in tail[2 * i:2 * i + 2]]
        self._key = None

    @property
    def key(self):
        """The structural key: equal keys, same executable."""
        if self._key is None:
            k = tuple(self.sig)
            if self.donated:
                k = k + (("donate",) + self.donated,)
            if self.device:
                k = k + (("device", self.device),)
            self._key = Key(k)
        return self._key

    def digest(self, salt=b"", inputs=None):
        """A stable hex digest of everything that decides the compiled program
        (for an on-disk cache), or None when an argument has no stable spelling."""
        h = hashlib.sha256(salt)
        pos = {}
        parts = []
        inputs = inputs if inputs is not None else [p.data for p in self.params]
        for p, x in zip(self.params, inputs):
            pos[id(p)] = len(pos)
            parts.append(f"P{p.entry!r}{tuple(getattr(x, 'shape', ()))}{getattr(x, 'dtype', '')}")
        for s in self.scalars:
            pos[id(s)] = len(pos)
            parts.append(f"S{s.entry}")
        for n in self.order:
            pos[id(n)] = len(pos)
            e = n.entry
            ops = ",".join(f"{pos[id(v[0])]}.{v[1]}" for v in n.operands)
            parts.append(f"N{e.name}|{e.static_key!r}|{ops}")
        parts.append("R" + ",".join(f"{pos[id(v[0])]}.{v[1]}" for v in self.roots))
        parts.append(f"D{tuple(self.donated)!r}")
        if self.device:
            parts.append(f"V{self.device}")
        text = "\n".join(parts)
        if " at 0x" in text:
            return None
        h.update(text.encode())
        return h.hexdigest()

    # -- walking --------------------------------------------------------------

    @property
    def nodes(self):
        """Every node, leaves included, operands before their users."""
        if self._nodes is None:
            pos = self.pos
            self._nodes = sorted(self.order + self.params + self.scalars, key=lambda n: pos[id(n)])
        return self._nodes

    @property
    def n_inputs(self):
        """Parameters plus one pool per scalar dtype (upstream counts graph inputs so)."""
        return len(self.params) + len({s.entry for s in self.scalars})

    # -- inputs -----------------------------------------------------------------

    def pools(self):
        """The scalar dtypes, in the order their pool arrays are fed."""
        return sorted({s.entry for s in self.scalars})

    def pool_arrays(self):
        by = collections.defaultdict(list)
        for s in self.scalars:
            by[s.entry].append(s.data)
        return [np.asarray(by[p], dtype=p) for p in sorted(by)]

    def param_arrays(self):
        """The device arrays of the parameters, in order. A placeholder leaf
        (shape and dtype, no data) can be traced, never run."""
        arrays = [p.data for p in self.params]
        for p, a in zip(self.params, arrays):
            if a is None:
                raise RuntimeError(f"torch_xla: a placeholder tensor ({xla_shape(*p.entry)}) has no data: "
                                   "it can be traced (graph text, HLO) but not computed or read")
        return arrays

    def inputs(self):
        """The arrays fed to the compiled program: parameters, then scalar pools."""
        return self.param_arrays() + self.pool_arrays()

    def input_specs(self, to_jax):
        """Abstract inputs (jax.ShapeDtypeStruct) for lowering without running;
        `to_jax` maps a leaf's torch dtype to its device storage dtype."""
        import jax
        specs = []
        for p in self.params:
            data = p.data
            if data is not None and hasattr(data, "shape") and hasattr(data, "dtype"):
                specs.append(jax.ShapeDtypeStruct(tuple(data.shape), data.dtype))
            else:   # a placeholder, in the layout mark_sharding gave it (if any)
                shape, dtype = p.entry
                specs.append(jax.ShapeDtypeStruct(tuple(shape), to_jax(dtype), sharding=layout_of(p)))
        specs += [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.pool_arrays()]
        return specs

    # -- replay -----------------------------------------------------------------

    def build_fn(self, ctx=None):
        """A Python function replaying the graph on JAX values (traced once by jit).

        `ctx` is the LoweringContext the rules run under (platform, collective
        axis, named scopes); each call of the function installs it."""
        ctx = ctx if ctx is not None else LoweringContext()
        pos = self.pos
        pool_index = {p: i for i, p in enumerate(self.pools())}
        counts = collections.Counter()
        scalar_slots = []
        for s in self.scalars:
            scalar_slots.append((pos[id(s)], pool_index[s.entry], counts[s.entry]))
            counts[s.entry] += 1
        param_slots = [pos[id(p)] for p in self.params]
        # padded device data (an uneven layout held in even shards, lazy/padding.py):
        # an input larger than its leaf's shape is read through a slice to it
        logical = [tuple(p.entry[0]) for p in self.params]
        scope_of = ctx.scope
        plan = [(pos[id(n)], n.entry, tuple((pos[id(v[0])], v[1]) for v in n.operands),
                 scope_of(n) if scope_of is not None else None) for n in self.order]
        outs = [(pos[id(v[0])], v[1]) for v in self.roots]
        n_params = len(self.params)

        def fn(*inputs):
            import jax
            env = {}
            for slot, x, shape in zip(param_slots, inputs[:n_params], logical):
                if x.shape != shape:
                    x = jax.lax.slice(x, (0,) * len(shape), shape)
                env[slot] = (x,)
            pool_arrays = inputs[n_params:]
            for slot, pi, k in scalar_slots:
                env[slot] = (pool_arrays[pi][k],)
            with lowering(ctx):
                for slot, entry, refs, scope in plan:
                    if scope is None:
                        env[slot] = apply_entry(entry, [env[s][i] for s, i in refs])
                    else:
                        with jax.named_scope(scope):
                            env[slot] = apply_entry(entry, [env[s][i] for s, i in refs])
            return [env[s][i] for s, i in outs]

        return fn
