"""Function nodes: scan, while loops, JAX calls and pure functions, each one IR
node whose lowering is a JAX function of its operands.

A `Spec` is the static half of such a node (what the memo keys on): a kind, a
structural key, the JAX function of the flat operands, the operand and output
avals. `apply(spec, operands)` traces the node; when autograd needs it, the node
is wrapped in `_FnNode` (a torch.autograd.Function) whose backward is another
function node: the `jax.vjp` of the spec's function with respect to the floating
operands that need a gradient.

Bodies written in torch (scan's `fn`, the loop functions, assume_pure) are
captured with `subgraph.capture`; the tensors they close over become trailing
operands, so gradients reach weights used inside a loop body.
"""
import hashlib

import jax
import torch
from jax import lax

from ...base import config
from ...base.dtypes import JAX_TO_TORCH
from ...ir import node as ir
from ...ops.context import lowering
from ...ops.op import OpInfo
from ..subgraph import CaptureError, capture, jax_spec  # noqa: F401  (re-exported)
from ..tensor import XLATensor
from .. import donation, index_checks
from ..state import value_of
from ..tracing import ValueArg, compile_context, trace_node, wrap
from ..views import assign
from . import random as rnd


class Spec:
    __slots__ = ("kind", "key", "fn", "in_avals", "out_avals", "differentiable", "_hash", "_repr")

    def __init__(self, kind, key, fn, in_avals, out_avals, differentiable=True):
        self.kind = kind
        self.key = key
        self.fn = fn
        self.in_avals = tuple(in_avals)
        self.out_avals = tuple(out_avals)
        self.differentiable = differentiable
        self._hash = hash((kind, key))
        self._repr = None

    def __eq__(self, other):
        return type(other) is Spec and self.kind == other.kind and self.key == other.key

    def __hash__(self):
        return self._hash

    def __repr__(self):
        # stable text (the graph key and the persistent cache's digest use it);
        # keys holding a function object spell its address, which disables the
        # on-disk cache for that graph only
        if self._repr is None:
            self._repr = f"{self.kind}<{hashlib.sha256(repr(self.key).encode()).hexdigest()[:16]}>"
            if " at 0x" in repr(self.key):
                self._repr += " at 0x"
        return self._repr


def _meta(spec, operands):
    return [torch.empty(s, dtype=d, device="meta") for s, d in spec.out_avals]


def _lowering(spec, operands):
    return list(spec.fn(*operands))


_INFOS = {}


def _info(kind):
    info = _INFOS.get(kind)
    if info is None:
        info = _INFOS[kind] = OpInfo(kind, None, _lowering, meta=_meta)
    return info


def _is_float(dtype):
    return dtype.is_floating_point or dtype.is_complex


def _trace(spec, operands):
    node, entry = trace_node(_info(spec.kind), (spec, list(operands)), {})
    return list(wrap(node, entry))


def apply(spec, operands):
    """Trace the function node `spec` on operands (XLA tensors or ValueArgs);
    -> list of output tensors, differentiable when the spec is and an operand
    requires grad."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    if spec.differentiable and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        slots = tuple(None if isinstance(o, torch.Tensor) else o for o in operands)
        return list(_FnNode.apply(spec, slots, *tensors))
    return _trace(spec, operands)


def _merge(slots, tensors):
    it = iter(tensors)
    return [next(it) if s is None else s for s in slots]


def _diff_positions(spec, slots, need):
    """Operand positions (and tensor indices) that get a gradient."""
    diff, where = [], []
    k = 0
    for i, s in enumerate(slots):
        if s is None:
            if need[k] and _is_float(spec.in_avals[i][1]):
                diff.append(i)
                where.append(k)
            k += 1
    return tuple(diff), where


class _FnNode(torch.autograd.Function):
    """Forward: the node, plus the residuals of its jax.vjp as extra outputs
    (one linearized forward; the backward node reads them). When the residuals
    cannot be tensors, the backward node recomputes the forward instead."""

    @staticmethod
    def forward(ctx, spec, slots, *tensors):
        diff, where = _diff_positions(spec, slots, ctx.needs_input_grad[2:])
        fouts = tuple(i for i, a in enumerate(spec.out_avals) if _is_float(a[1]))
        ctx.spec, ctx.slots, ctx.diff, ctx.where, ctx.fouts = spec, slots, diff, where, fouts
        ops = _merge(slots, tensors)
        split = _split_specs(spec, diff, fouts) if diff and fouts and not config.read("XLA_SCAN_RECOMPUTE") else None
        ctx.split = split
        if split is not None:
            fwd, _bwd = split
            res = _trace(fwd, ops)
            n = len(spec.out_avals)
            outs = res[:n]
            # saved, not kept on ctx: autograd frees them after the backward, so a
            # step's barrier does not return every layer's residuals as outputs
            ctx.save_for_backward(*res[n:])
        else:
            outs = _trace(spec, ops)
            ctx.save_for_backward(*tensors)
        nondiff = [o for o, a in zip(outs, spec.out_avals) if not _is_float(a[1])]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        spec = ctx.spec
        n_tensors = sum(1 for s in ctx.slots if s is None)
        result = [None] * n_tensors
        if ctx.diff and ctx.fouts:
            def ct(i):
                if grads[i] is not None:
                    return grads[i]
                return torch.zeros(spec.out_avals[i][0], dtype=spec.out_avals[i][1], device="xla")
            cts = [ct(i) for i in ctx.fouts]
            if ctx.split is not None:
                gs = apply(ctx.split[1], list(ctx.saved_tensors) + cts)
            else:
                tensors = ctx.saved_tensors
                gs = apply(vjp_spec(spec, ctx.diff, ctx.fouts), _merge(ctx.slots, tensors) + cts)
            for k, g in zip(ctx.where, gs):
                result[k] = g
        return (None, None) + tuple(result)


_vjp_specs = {}


def vjp_spec(spec, diff, fouts):
    """The function node computing the gradients of `spec`'s operands `diff` from
    cotangents of its floating outputs `fouts` (jax.vjp; the forward is
    recomputed inside, so the node needs only the forward's operands)."""
    key = (spec, diff, fouts)
    v = _vjp_specs.get(key)
    if v is not None:
        return v
    n = len(spec.in_avals)
    f_forward = spec.fn

    def fn(*args):
        prim = list(args[:n])
        cts = args[n:]

        def f(*d):
            full = list(prim)
            for i, x in zip(diff, d):
                full[i] = x
            outs = f_forward(*full)
            return [outs[i] for i in fouts]

        outs, pull = jax.vjp(f, *[prim[i] for i in diff])
        return list(pull([c.astype(o.dtype) for c, o in zip(cts, outs)]))

    in_avals = spec.in_avals + tuple(spec.out_avals[i] for i in fouts)
    out_avals = [spec.in_avals[i] for i in diff]
    v = Spec(spec.kind + "_backward", ("vjp", spec.kind, spec.key, diff, fouts), fn, in_avals, out_avals)
    if len(_vjp_specs) > 1024:
        _vjp_specs.clear()
    _vjp_specs[key] = v
    return v


_split_cache = {}


def _split_specs(spec, diff, fouts):
    """(forward spec with the vjp residuals as extra outputs, backward spec from
    residuals and cotangents to the gradients of `diff`), or None when a
    residual has no torch dtype."""
    # a function may pick a platform's kernel while lowered (custom_kernel's cuDNN
    # attention), whose vjp residuals differ from the reference's: the residuals are
    # shaped for the platform the graph compiles for
    context = compile_context()
    platform = context.platform
    key = (spec, diff, fouts, platform)
    if key in _split_cache:
        return _split_cache[key]
    n = len(spec.in_avals)
    f_forward = spec.fn
    others = tuple(i for i in range(len(spec.out_avals)) if i not in fouts)

    def linearized(*ops):
        prim = list(ops[:n])

        def f(*d):
            full = list(prim)
            for i, x in zip(diff, d):
                full[i] = x
            outs = f_forward(*full)
            return [outs[i] for i in fouts], [outs[i] for i in others]

        return jax.vjp(f, *[prim[i] for i in diff], has_aux=True)

    try:
        with lowering(context):
            _outs, pull, _aux = jax.eval_shape(linearized, *[jax_spec(a) for a in spec.in_avals])
        res_structs, tdef = jax.tree_util.tree_flatten(pull)
        res_avals = [(tuple(r.shape), JAX_TO_TORCH[r.dtype]) for r in res_structs]
    except (KeyError, TypeError):
        _split_cache[key] = None
        return None

    def fwd_fn(*ops):
        outs, pull, aux = linearized(*ops)
        full = [None] * len(spec.out_avals)
        for i, o in zip(fouts, outs):
            full[i] = o
        for i, o in zip(others, aux):
            full[i] = o
        return full + jax.tree_util.tree_leaves(pull)

    def bwd_fn(*args):
        nr = len(res_avals)
        pull = jax.tree_util.tree_unflatten(tdef, list(args[:nr]))
        cts = [c.astype(jax.numpy.dtype(to_dt)) for c, to_dt in
               zip(args[nr:], [jax_spec(spec.out_avals[i]).dtype for i in fouts])]
        return list(pull(cts))

    fwd = Spec(spec.kind, ("fwd", spec.key, diff, fouts, platform), fwd_fn, spec.in_avals,
               list(spec.out_avals) + res_avals, differentiable=False)
    bwd = Spec(spec.kind + "_backward", ("bwd", spec.key, diff, fouts, platform), bwd_fn,
               res_avals + [spec.out_avals[i] for i in fouts],
               [spec.in_avals[i] for i in diff])
    if len(_split_cache) > 1024:
        _split_cache.clear()
    _split_cache[key] = (fwd, bwd)
    return fwd, bwd


# ---------------------------------------------------------------------------
# scan

def _grad_flags(tensors):
    """Which operands of a loop body a gradient will flow to (float tensors that
    require grad, with grad mode on): the body is traced with its inputs in the
    same state, so PyTorch's composite ops decompose as they would outside a loop."""
    if not torch.is_grad_enabled():
        return ()
    flags = tuple(bool(t.requires_grad and _is_float(t.dtype)) for t in tensors)
    return flags if any(flags) else ()


def _as_differentiated(fn_flat, grads):
    """fn_flat called on inputs that require grad where `grads` says so.

    PyTorch's composite ops choose their decomposition by their inputs'
    requires_grad: `linear`/`matmul` of a non-contiguous 3-D activation by a weight
    that requires grad folds into one `mm` (what a layer outside a loop does), by
    one that does not it expands the weight to a batched `bmm`, whose gradient is
    a per-batch outer product summed afterwards, and whose expanded weight becomes
    a residual stacked over the loop: many times the memory and time. The body's
    own autograd graph is never run (capture saves nothing for it); its gradient
    is the jax.vjp of the loop. Each input is a clone of a leaf that requires grad
    (a clone lowers to nothing), so the body may still write into it in place."""
    if not grads:
        return fn_flat

    def traced(*phs):
        return fn_flat(*[p.requires_grad_().clone() if g else p for p, g in zip(phs, grads)])
    return traced


def scan(fn_flat, n_carry, init, xs, reverse=False, name="scan's fn", body_cache=None, remat=False):
    """lax.scan of fn_flat(*carry, *x_slices) -> [*new_carry, *y_slices] over the
    leading dimension of xs (lists of XLA tensors); -> (carry list, ys list).
    `body_cache` (a dict, for functions declared pure): a captured body that closes
    over no tensor is kept there by the avals and reused instead of tracing again."""
    length = xs[0].shape[0]
    for x in xs:
        if x.dim() == 0 or x.shape[0] != length:
            raise ValueError("scan: every leaf of xs needs the same leading dimension "
                             f"(got {[tuple(t.shape) for t in xs]})")
    carry_avals = [t._lazy.aval for t in init]
    x_avals = [(tuple(x.shape[1:]), x.dtype) for x in xs]
    grads = _grad_flags(list(init) + list(xs))
    cache_key = (tuple(carry_avals), tuple(x_avals), grads)
    body = body_cache.get(cache_key) if body_cache is not None else None
    cached = body is not None
    seed_slots = ()
    if body is None:
        pin, taken = _seed_pin(rnd.rng.seed)
        body = capture(_as_differentiated(fn_flat, grads), carry_avals + x_avals, name, pin=pin)
        seed_slots = tuple(j for j, _ in _seed_slots(body, taken))
        # reusable when it closes over no tensor (Python numbers it closed over are
        # fixed for a pure fn, and are kept with it) and draws no random numbers
        # (those take fresh seeds from the generator on every call)
        if body_cache is not None and not seed_slots and all(t is None for t in body.ext_tensors):
            body_cache[cache_key] = body
            cached = True
    nc, nx = len(init), len(xs)
    got = [(tuple(s), d) for s, d in body.out_avals[:nc]]
    if got != [(tuple(s), d) for s, d in carry_avals]:
        raise ValueError(f"scan: fn must return a carry of the same shapes and dtypes as init; "
                         f"init has {carry_avals}, fn returned {got}")
    y_avals = [((length,) + tuple(s), d) for s, d in body.out_avals[nc:]]

    def fn(*ops):
        c0 = tuple(ops[:nc])
        xs_ = tuple(ops[nc:nc + nx])
        ext = list(ops[nc + nx:])
        f = body.jax_fn()

        def step(c, x):
            e = ext
            if seed_slots:
                # random ops in fn draw new numbers each iteration: their seeds are
                # moved by an iteration counter carried beside the user's carry
                i, c = c[0], c[1:]
                e = list(ext)
                for j in seed_slots:
                    e[j] = e[j] + (i + 1) * _SEED_STRIDE
            o = f(list(c) + list(x), e)
            new = tuple(a.astype(b.dtype) for a, b in zip(o[:nc], c))
            return ((i + 1,) + new if seed_slots else new), tuple(o[nc:])

        if seed_slots:
            c0 = (lax.full((), 0, ext[seed_slots[0]].dtype),) + c0
        if remat:   # keep only the carry per iteration; the backward loop recomputes the rest
            step = jax.checkpoint(step, prevent_cse=False)
        c, ys = lax.scan(step, c0, xs_, length=length, reverse=reverse)
        return list(c[1:] if seed_slots else c) + list(ys)

    spec = Spec("scan", (body.key, nc, nx, length, bool(reverse), bool(remat), seed_slots), fn,
                carry_avals + [x._lazy.aval for x in xs] + list(body.ext_avals),
                carry_avals + y_avals)
    operands = list(init) + list(xs) + body.ext_operands()
    if not cached:
        _release(body)
    outs = apply(spec, operands)
    return outs[:nc], outs[nc:]


_SEED_STRIDE = 0x5851F42D4C957F2D   # odd: iteration i's seeds differ for every i < 2**64


def _seed_pin(start):
    """A `pin` for capture that keeps the seeds random ops took from the generator
    (from `start` on) while fn was traced as operands of the body, not random
    values drawn once outside it; -> (pin, taken seeds, in the order taken)."""
    taken = []

    def pin():
        s = start
        while s != rnd.rng.seed and len(taken) < 1 << 16:
            taken.append(s)
            s = rnd.advance(s)
        if not taken:
            return None
        seeds = set(taken)
        return lambda n: n.kind == 1 and n.entry == "int64" and n.data in seeds
    return pin, taken


def _seed_slots(body, taken):
    """(j, k): body's closed-over operand j is the k-th seed the trace took."""
    where = {v: k for k, v in enumerate(taken)}
    return tuple((j, where[v[0].data]) for j, v in enumerate(body.ext_values or ())
                 if v[0].kind == 1 and v[0].entry == "int64" and v[0].data in where)


def _release(body):
    # the spec (kept by the op memo) holds the body: it must not keep tensors alive
    body.ext_tensors = None
    body.ext_values = None


# ---------------------------------------------------------------------------
# while loops (forward only)

def while_loop(cond_flat, body_flat, carried, name="while_loop"):
    """lax.while_loop: cond_flat(*carry) -> 0-dim tensor, body_flat(*carry) -> new carry."""
    avals = [t._lazy.aval for t in carried]
    cb = capture(cond_flat, avals, "cond_fn")
    if len(cb.out_avals) != 1 or tuple(cb.out_avals[0][0]) != ():
        raise ValueError(f"while_loop: cond_fn must return one 0-dim tensor, got {list(cb.out_avals)}")
    bb = capture(body_flat, avals, "body_fn")
    if [tuple(s) for s, _ in bb.out_avals] != [tuple(s) for s, _ in avals]:
        raise ValueError(f"while_loop: body_fn must return tensors of the carried shapes "
                         f"{[list(s) for s, _ in avals]}, got {[list(s) for s, _ in bb.out_avals]}")
    n, nce = len(carried), len(cb.ext_avals)

    def fn(*ops):
        c0 = tuple(ops[:n])
        ce = list(ops[n:n + nce])
        be = list(ops[n + nce:])
        cf = cb.jax_fn()
        bf = bb.jax_fn()

        def cond(c):
            return cf(list(c), ce)[0].astype(bool)

        def body(c):
            return tuple(a.astype(b.dtype) for a, b in zip(bf(list(c), be), c))

        return list(lax.while_loop(cond, body, c0))

    spec = Spec("while_loop", (cb.key, bb.key, n), fn,
                avals + list(cb.ext_avals) + list(bb.ext_avals), avals, differentiable=False)
    operands = list(carried) + cb.ext_operands() + bb.ext_operands()
    _release(cb)
    _release(bb)
    return apply(spec, operands)


# ---------------------------------------------------------------------------
# JAX functions in the graph

_call_cache = {}


def static_key(x):
    """A cache-key part for a non-tensor argument: its value when hashable, else its identity."""
    try:
        hash(x)
        return ("v", type(x), x)
    except TypeError:
        return ("id", id(x))


def call_jax(jax_fn, args, kwargs=None, name=None):
    """jax_fn(*args, **kwargs) as one node; XLA tensors in args/kwargs (any pytree)
    are passed as JAX arrays, everything else as Python values. -> the result
    pytree with XLA tensors for arrays."""
    kwargs = kwargs or {}
    leaves, tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs)))
    tensors, statics, is_t = [], [], []
    for x in leaves:
        if isinstance(x, XLATensor):
            tensors.append(x)
            is_t.append(True)
        elif isinstance(x, torch.Tensor):
            raise TypeError(f"call_jax: tensors must be on the XLA device, got one on {x.device}")
        else:
            statics.append(x)
            is_t.append(False)
    in_avals = tuple(t._lazy.aval for t in tensors)
    key = (jax_fn, tree, tuple(is_t), tuple(static_key(s) for s in statics), in_avals, name)
    spec = _call_cache.get(key)
    if spec is None:
        def call(*arrays):
            ai, si = iter(arrays), iter(statics)
            full = [next(ai) if t else next(si) for t in is_t]
            a, k = jax.tree_util.tree_unflatten(tree, full)
            return jax_fn(*a, **k)

        out = jax.eval_shape(call, *[jax_spec(a) for a in in_avals])
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        out_avals = [(tuple(o.shape), JAX_TO_TORCH[o.dtype]) for o in out_leaves]

        def fn(*arrays):
            return jax.tree_util.tree_leaves(call(*arrays))

        spec = Spec("call_jax" if name is None else f"call_jax_{name}", key, fn, in_avals, out_avals)
        spec_tree = out_tree
        if len(_call_cache) > 4096:
            _call_cache.clear()
        _call_cache[key] = spec = (spec, spec_tree)
    spec, out_tree = spec
    outs = apply(spec, tensors)
    return jax.tree_util.tree_unflatten(out_tree, outs)


# ---------------------------------------------------------------------------
# pure functions traced once

_SENTINEL_SEED = 0x5EED5EED5EED


def _captured(fn_flat, in_avals, name, seeded, whole=False):
    """capture(fn_flat); with `seeded` the generator stands at a sentinel seed
    meanwhile, so the seeds random ops take are known and stay operands of the
    body; -> (body, the seeds taken, in order)."""
    if not seeded:
        return capture(fn_flat, in_avals, name, whole=whole), []
    saved = rnd.rng.seed
    rnd.rng.seed = _SENTINEL_SEED
    pin, taken = _seed_pin(_SENTINEL_SEED)
    try:
        return capture(fn_flat, in_avals, name, pin=pin, whole=whole), taken
    finally:
        rnd.rng.seed = saved


def _body_spec(kind, body):
    """The function node running body on its inputs, then its externals."""
    n = len(body.in_avals)

    def fn(*ops):
        return body.jax_fn()(list(ops[:n]), list(ops[n:]))

    return Spec(kind, body.key, fn, list(body.in_avals) + list(body.ext_avals), body.out_avals)


def pure_body(fn_flat, in_avals, name="assume_pure function", seeded=False):
    """Capture fn_flat once; -> a handle for apply_pure. The externals keep the
    values they had at capture (as a jitted function's constants); with
    `seeded`, the seeds random ops took are replaced on each call by the ones a
    generator seeded with the call's `rng_seed` would give."""
    body, taken = _captured(fn_flat, in_avals, name, seeded)
    for t, a in zip(body.ext_tensors, body.ext_avals):
        if t is not None and t.requires_grad:
            raise CaptureError(
                f"torch_xla: {name} closes over a tensor of shape {list(a[0])} that requires grad; "
                "pass it as an argument (assume_pure replays the first trace, so closed-over "
                "tensors are frozen)")
    ext = [ValueArg(v, a) for v, a in zip(body.ext_values, body.ext_avals)]
    seed_slots = _seed_slots(body, taken)
    spec = _body_spec("assume_pure", body)
    _release(body)
    return spec, ext, tuple(seed_slots)


def apply_pure(handle, tensors, rng_seed=None):
    """Replay a pure_body handle on tensors (its inputs, in order)."""
    spec, ext, seed_slots = handle
    if seed_slots:
        if rng_seed is None:
            raise ValueError("this function takes an rng_seed")
        ext = list(ext)
        seeds = [int(rng_seed) & rnd._MASK]
        for j, k in seed_slots:
            while len(seeds) <= k:
                seeds.append(rnd.advance(seeds[-1]))
            ext[j] = ValueArg(ir.scalar_value(seeds[k], "int64"), ((), torch.int64))
    return apply(spec, list(tensors) + list(ext))


# ---------------------------------------------------------------------------
# graphs called as one node (torch.compile's openxla backends)

class GraphCall:
    """A function captured whole, called as one node per call.

    pure: the apply_pure handle (the node's spec; its trailing operands: tensors
    from outside, read anew at each call, or fixed values; which of them are
    seeds); n_seeds: how many seeds the trace took from the generator;
    written: the inputs the function writes in place (their new values follow
    its outputs, in that order); checks: the index checks the body computes
    (its last outputs), handed to the next barrier at each call; donors:
    (input, flag) buffer-donor marks the function asked, for the first call;
    donating: the inputs that came as marked donors at the first call (None
    before it): later calls donate them too, a copy where the argument is not
    marked, so its tensor keeps its value and nothing recompiles (Dynamo does
    not guard the marks)."""
    __slots__ = ("pure", "n_seeds", "written", "checks", "donors", "donating")


def capture_graph(fn_flat, in_avals, name="compiled graph"):
    """Trace fn_flat(*inputs) -> list of XLA tensors once on placeholders of
    in_avals; -> GraphCall. Raises CaptureError when the function cannot be a
    pure node (it writes into a tensor it closes over, keeps a result alive,
    returns something else than XLA tensors), and RuntimeError when it reads a
    value on the host."""
    written = []
    ph_nodes = []

    def traced(*phs):
        ph_nodes[:] = [p._lazy.value[0] for p in phs]
        outs = list(fn_flat(*phs))
        written[:] = [k for k, (p, n) in enumerate(zip(phs, ph_nodes)) if p._lazy.value[0] is not n]
        return outs + [phs[k] for k in written]

    donation.log_requests(True)
    try:
        body, taken = _captured(traced, in_avals, name, seeded=True, whole=True)
    finally:
        asked = donation.log_requests(False)
    g = GraphCall()
    g.pure = (_body_spec("compiled_graph", body), tuple(body.ext_operands()), _seed_slots(body, taken))
    g.n_seeds = len(taken)
    g.written = tuple(written)
    g.checks = body.checks
    # buffer-donor marks the function asked of its inputs (dynamo_set_buffer_donor_):
    # the first call applies them to its arguments, as the lazy trace would have
    where = {id(nd): k for k, nd in enumerate(ph_nodes)}
    g.donors = [(where[id(nd)], flag) for nd, flag in asked if id(nd) in where]
    g.donating = None
    _release(body)
    return g


def call_graph(g, tensors):
    """One call of a captured graph on its input tensors: one node; the inputs
    it writes get their new values. Random ops take fresh seeds from the
    device generator, the same ones a lazy trace of the function would take.
    -> the function's outputs (without the written inputs)."""
    if g.donors:
        for k, flag in g.donors:
            donation.set_donation(tensors[k], flag)
        g.donors = None
    if g.donating is None:
        g.donating = tuple(k for k, t in enumerate(tensors) if donation.get_donation(t))
    operands = tensors
    for k in g.donating:
        if not donation.get_donation(tensors[k]):
            copy = donation.donor_copy(tensors[k])
            if copy is not None:
                operands = list(operands) if operands is tensors else operands
                operands[k] = copy
    seed = rnd.rng.seed
    if g.n_seeds:
        rnd.rng.seed = rnd.advance(seed, g.n_seeds)
    outs = apply_pure(g.pure, operands, seed)
    if g.checks:
        nc = len(outs) - len(g.checks)
        index_checks.add([value_of(f) for f in outs[nc:]], g.checks)
        outs = outs[:nc]
    if not g.written:
        return outs
    n = len(outs) - len(g.written)
    for k, v in zip(g.written, outs[n:]):
        assign(tensors[k], value_of(v), fresh=True)
    return outs[:n]
