"""Choosing how an aten op runs on the XLA device, once per op.

make_handler(func) classifies an overload by its schema and returns a
handler(args, kwargs):
  registered handler   ops with their own logic (copy_, item, random, ...)
  view                 aliasing outputs (views.py)
  in-place / out=      run the functional twin, then assign the result
  lowered              one IR node (tracing.trace_node)
  decomposed           torch._decomp rule run on XLA tensors (each sub-op traced)
  fallback             run on the CPU (fallback.py), counted as aten::<op>
"""
import torch
from torch._decomp import decomposition_table

from ..ir.node import OP, Node
from ..ops import checks, registry
from . import fallback, index_checks, state, tracing, views
from .tensor import XLATensor, _handlers, new_base
from .tracing import (DeviceMismatch, device_mismatch_error, make_entry, meta_arg, op_info,
                      trace_node, walk_args, wrap)
from .views import assign_result

aten = torch.ops.aten


def _decomposition(func):
    return decomposition_table.get(func)


def _is_view(schema):
    rets = schema.returns
    if not rets or not schema.arguments:
        return False
    a0 = schema.arguments[0].alias_info
    if a0 is None or a0.is_write:
        return False
    r0 = rets[0].alias_info
    return r0 is not None and not r0.is_write


def _mutated_args(schema):
    return [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _functional_twin(func):
    """add_.Tensor -> add.Tensor; add.out -> add.Tensor (matching argument names)."""
    schema = func._schema
    name = schema.name.split("::")[-1]
    ov = func._overloadname
    if name.endswith("_") and not name.startswith("__"):
        packet = getattr(aten, name[:-1], None)
        if packet is not None:
            sig = [(a.name, str(a.type)) for a in schema.arguments]
            twin = getattr(packet, ov, None)
            if twin is not None and not _mutated_args(twin._schema) \
                    and [(a.name, str(a.type)) for a in twin._schema.arguments] == sig:
                return twin
            # same overload name, other signature (pow_.Scalar is pow.Tensor_Scalar)
            for cand_name in packet.overloads():
                cand = getattr(packet, cand_name)
                if not _mutated_args(cand._schema) and [(a.name, str(a.type)) for a in cand._schema.arguments] == sig:
                    return cand
            if twin is not None and not _mutated_args(twin._schema):
                return twin
        return None
    packet = getattr(aten, name, None)
    if packet is None:
        return None
    # fmod.Scalar_out -> fmod.Scalar, not fmod.Tensor: the names match both, the types
    # one (a Python `other` given to the Tensor overload fails to parse)
    want = [(a.name, str(a.type)) for a in schema.arguments if not (a.alias_info and a.alias_info.is_write)]
    by_name = None
    for cand_name in packet.overloads():
        cand = getattr(packet, cand_name)
        if _mutated_args(cand._schema):
            continue
        sig = [(a.name, str(a.type)) for a in cand._schema.arguments]
        if sig == want:
            return cand
        if by_name is None and [n for n, _ in sig] == [n for n, _ in want]:
            by_name = cand
    return by_name


def handler_of(func):
    """The handler of aten op func (made and kept on first use)."""
    h = _handlers.get(func)
    if h is None:
        h = _handlers[func] = make_handler(func)
    return h


def call(func, args, kwargs):
    """Run aten op func on XLA tensors through its handler (what dispatch would do)."""
    return handler_of(func)(args, kwargs)


def functional_handler(info):
    """The handler of an op with a lowering: one node, its outputs new base tensors."""
    memo = info.memo

    def h(args, kwargs):
        # trace_node + wrap, inlined: this is the per-op hot path
        try:
            key, ops, hs = walk_args(args, kwargs, info)
        except DeviceMismatch as exc:
            raise device_mismatch_error(info.name, exc.args[0]) from None
        e = memo.get(key)
        if e is None:
            e = memo[key] = make_entry(info, key, args, kwargs)
        info.traced += 1
        hs.append(e.hash)
        node = Node(OP, e, tuple(ops), hash(tuple(hs)))
        if e.out_struct is None:
            return new_base((node, 0), e.out_avals[0])
        return wrap(node, e)
    h._lowered = info   # in-place twins trace through it directly (_inplace_handler)
    return h


def _fast_key(a):
    """A key of a decomposition's argument: avals for XLA tensors, types for float
    operands, values otherwise (unhashable where the value is)."""
    t = type(a)
    if t is XLATensor:
        return a._lazy.aval
    if t is float or t is complex:
        return t
    if t is list or t is tuple:
        return tuple(_fast_key(x) for x in a)
    if isinstance(a, torch.Tensor):
        return (a.dtype, tuple(a.shape), a.device.type)
    try:
        hash(a)
    except TypeError:
        return []
    return (t, a)


def _decomp_handler(func, decomp):
    passed = set()   # argument keys eager's checks passed (checks.refusal)

    def h(args, kwargs):
        # the dtypes eager's CPU kernel refuses (the rule's own ops might take them),
        # asked once per argument key: this is a per-call path
        key = (_fast_key(args), _fast_key(tuple(kwargs.items())) if kwargs else ())
        try:
            known = key in passed
        except TypeError:   # an unhashable argument
            key, known = None, False
        if not known:
            refused = checks.refusal(func, args, kwargs)
            if refused is not None:
                raise tracing.with_note(tracing.dimension_error(refused),
                                        tracing.tracing_note(func.name().split("::")[-1], args, kwargs))
            if key is not None:
                passed.add(key)
        out = decomp(*args, **kwargs)
        if out is NotImplemented:  # the rule does not cover these arguments
            return fallback.run_on_cpu(func, args, kwargs)
        return out
    h._untraced = True
    return h


def _composite(func):
    def h(args, kwargs):
        return func.decompose(*args, **kwargs)
    h._untraced = True
    return h


def _lowered_twin(twin, mut):
    """The OpInfo an in-place op writing args `mut` traces its functional `twin`
    with directly: when it writes self only, the twin has one tensor result and
    the twin's handler is the plain lowered one; else None."""
    rets = twin._schema.returns
    if mut != [0] or len(rets) != 1 or str(rets[0].type) != "Tensor":
        return None
    return getattr(handler_of(twin), "_lowered", None)


def _inplace_handler(func, twin):
    twin_h = None
    lowered = None   # the twin's OpInfo when its handler is the plain lowered one
    mut = _mutated_args(func._schema)
    checked = set()

    def h(args, kwargs):
        nonlocal twin_h, lowered
        if twin_h is None:
            twin_h = lambda a, k: call(twin, a, k)  # noqa: E731
            lowered = _lowered_twin(twin, mut)
        if len(args) > 1:
            views.check_partial_overlap(args[0], args[1:])
        if lowered is not None and type(args[0]) is XLATensor:
            # the hot case (an optimizer's add_/mul_): the twin's node is traced here and
            # its value written into self, with no result tensor made in between
            target = args[0]
            try:
                node, e = trace_node(lowered, args, kwargs)
            except NotImplementedError:
                _raise_write_error(func, args, kwargs)   # as the general path below
                raise
            if e.out_avals[0] == target._lazy.aval:
                views.assign(target, (node, 0))
                return target
            res = new_base((node, 0), e.out_avals[0])
            _check_inplace(func, target, res, args, kwargs, checked)
            assign_result(target, res)
            return target
        try:
            res = twin_h(args, kwargs)
        except NotImplementedError:
            # the twin's dtype refusal; eager checks the write into self first
            _raise_write_error(func, args, kwargs)
            raise
        if mut == [0]:
            targets = args[0]
            if isinstance(targets, (list, tuple)):
                for t, r in zip(targets, res):
                    _check_inplace(func, t, r, args, kwargs, checked)
                    assign_result(t, r)
                return None
            _check_inplace(func, targets, res, args, kwargs, checked)
            assign_result(targets, res)
            return targets
        raise NotImplementedError(func)
    return h


def _raise_inplace(func, err):
    raise type(err)(f"{err}\n  [torch_xla] in aten::{func._schema.name.split('::')[-1]} at {tracing.where()}") from None


def _eager_verdict(func, args, kwargs):
    """What eager raises for the write op `func` (in-place or out=) on these
    arguments: at their real shapes when they are small, else on stand-ins."""
    margs = tuple(meta_arg(a) for a in args)
    mkw = {k: meta_arg(v) for k, v in kwargs.items()}
    if checks.small(margs, mkw):
        return checks.eager_error(func, margs, mkw, real=True)
    return checks.eager_error(func, margs, mkw)


def _raise_write_error(func, args, kwargs):
    """The functional twin refused the dtypes; eager's write op may refuse the
    write itself first (`bool_t |= bf16_t`: the result type cannot be cast to
    Bool). Raise that when it is what eager raises."""
    err = _eager_verdict(func, args, kwargs)
    if err is not None and not isinstance(err, NotImplementedError):
        _raise_inplace(func, err)


def _check_inplace(func, target, res, args, kwargs, checked):
    """Refuse what eager would (dtype casts, broadcasts), in eager's words."""
    ra, ta = res._lazy.aval, target._lazy.aval
    if ra == ta:
        return
    if ra[0] != ta[0]:
        # the broadcast of the operands is larger than self (an in-place op
        # writes self's shape): eager refuses, in its kernel's words
        err = checks.eager_error(func, tuple(meta_arg(a) for a in args),
                                 {k: meta_arg(v) for k, v in kwargs.items()}, real=True) \
            or views.broadcast_error(ta[0], ra[0]) or RuntimeError(
                f"output with shape {list(ta[0])} doesn't match the broadcast shape {list(ra[0])}")
        _raise_inplace(func, err)
    key = (ta, ra)
    if key in checked:
        return
    # the meta kernels let `long_t *= 0.0` through, and word what they refuse their
    # own way; eager's kernel, on stand-ins of the same dtypes, decides and words it
    # (each call gets its own meta arguments: a meta in-place kernel may resize them)
    try:
        func(*(meta_arg(a) for a in args), **{k: meta_arg(v) for k, v in kwargs.items()})
    except RuntimeError as e:
        err = _eager_verdict(func, args, kwargs) or e
    else:
        err = checks.eager_error(func, tuple(meta_arg(a) for a in args),
                                 {k: meta_arg(v) for k, v in kwargs.items()})
    if err is not None:
        _raise_inplace(func, err)
    checked.add(key)


def _out_handler(func, twin):
    schema = func._schema
    out_names = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write and a.kwarg_only]
    in_names = [a.name for a in schema.arguments if not (a.alias_info and a.alias_info.is_write)]

    def h(args, kwargs):
        kw = {k: v for k, v in kwargs.items() if k not in out_names}
        outs = [kwargs[n] for n in out_names]
        _check_out_overlap(func, args, kwargs, outs, kw)
        try:
            res = call(twin, args, kw)
        except NotImplementedError:
            _raise_write_error(func, args, kwargs)   # eager checks the out= tensors first
            raise
        results = [res] if len(outs) == 1 else list(res)
        wanted = {n: r.dtype for n, o, r in zip(out_names, outs, results)
                  if isinstance(o, XLATensor) and isinstance(r, torch.Tensor) and o.dtype != r.dtype}
        if wanted:
            # an out= tensor of another dtype than the result: eager casts into it or refuses
            err = checks.out_refusal(func, tuple(meta_arg(a) for a in args),
                                     {k: meta_arg(v) for k, v in kwargs.items()}, wanted)
            if err is not None:
                _raise_inplace(func, err)
        for o, r in zip(outs, results):
            if isinstance(o, torch.Tensor) and o.device.type != "xla":
                o.copy_(r.cpu())
                continue
            if o._lazy.aval[0] != r._lazy.aval[0]:
                # PyTorch resizes a wrong-shaped out= tensor (warning when it had elements)
                views.resize_out(o, r._lazy.aval[0], schema.name.split("::")[-1])
            assign_result(o, r)
        return outs[0] if len(outs) == 1 else tuple(outs)
    del in_names
    return h


def _tensors(a, out):
    if isinstance(a, XLATensor):
        out.append(a)
    elif isinstance(a, (list, tuple)):
        for x in a:
            _tensors(x, out)
    return out


def _check_out_overlap(func, args, kwargs, outs, inputs_kw):
    """An out= tensor sharing memory with an input: eager refuses some overlaps
    (index_select, cat, gather: any; elementwise ops: partial) and allows others
    (reductions, mm). Eager decides, on CPU tensors laid out in one storage as
    ours are in their Base (`unsupported operation: some elements of the input
    tensor and the written-to tensor refer to a single memory location`)."""
    inputs = _tensors(list(args) + list(inputs_kw.values()), [])
    if not inputs:
        return
    shared = {id(state.base_of(o)) for o in outs if isinstance(o, XLATensor)}
    if not any(id(state.base_of(t)) in shared for t in inputs):
        return
    err = _aliased_verdict(func, args, kwargs)
    if err is None:
        for o in outs:   # too large to ask eager: the partial overlaps elementwise ops refuse
            if isinstance(o, XLATensor):
                views.check_partial_overlap(o, inputs)
    elif err is not False:
        _raise_inplace(func, err)


def _aliased_verdict(func, args, kwargs):
    """Eager's error for this write op on CPU copies of its tensors, laid out in
    one storage per Base as ours are (an overlap, or an out= tensor that is also
    an input and so is not resized); False when eager finds neither; None when
    a storage is too large to copy."""
    storages = {}
    made = {}   # one CPU tensor per XLA tensor: eager tells an out= that is an input by identity
    limit = checks.REAL_SHAPES_MAX

    def storage(base):
        buf = storages.get(id(base))
        if buf is None:
            n = 1
            for d in base.aval[0]:
                n *= d
            if n > limit:
                raise OverflowError
            buf = storages[id(base)] = torch.zeros(n, dtype=base.aval[1], device="cpu")
        return buf

    def cpu(a):
        if isinstance(a, XLATensor):
            if id(a) not in made:
                buf = storage(state.base_of(a))
                made[id(a)] = (buf.as_strided(a.shape, a.stride(), a.storage_offset()) if buf.dtype == a.dtype
                               else torch.zeros(a.shape, dtype=a.dtype, device="cpu"))
            return made[id(a)]
        if isinstance(a, (list, tuple)):
            return type(a)(cpu(x) for x in a)
        if isinstance(a, torch.device) and a.type == "xla":
            return torch.device("cpu")
        return a

    try:
        cargs = tuple(cpu(a) for a in args)
        ckw = {k: cpu(v) for k, v in kwargs.items()}
    except OverflowError:
        return None
    try:
        checks.run_quietly(func, cargs, ckw)
    except RuntimeError as e:
        if str(e).startswith(("unsupported operation:", "output with shape")):
            return e
    except Exception:  # noqa: BLE001  (values: zeros stand in; only the layout is asked)
        pass
    return False


_FOREACH_CANDIDATES = {
    "default": ("default",),
    "List": ("Tensor", "default", "Tensor_Tensor"),
    "Tensor": ("Tensor", "default", "Tensor_Tensor"),
    "Scalar": ("Scalar", "Tensor", "default", "Tensor_Scalar"),
    "ScalarList": ("Scalar", "Tensor", "default", "Tensor_Scalar"),
    "ScalarAndTensor": ("Scalar", "Scalar_Tensor"),
}


def _foreach_handler(func):
    """_foreach_<op>[_] over lists: the per-tensor op on each element, traced as
    one node when the elements allow (_trace_foreach), else element by element."""
    name = func._schema.name.split("::")[-1]
    inplace = name.endswith("_")
    base = name[len("_foreach_"):].rstrip("_")
    if base == "norm":
        elem_packet, cands = aten.linalg_vector_norm, ("default",)
    else:
        elem_packet = getattr(aten, base + ("_" if inplace else ""), None)
        cands = _FOREACH_CANDIDATES.get(func._overloadname, ())
    elem = None
    for c in cands:
        elem = getattr(elem_packet, c, None) if elem_packet is not None else None
        if elem is not None:
            break
    if elem is None:
        return fallback.handler(func)
    arg_is_list = [("[]" in str(a.type) or "List" in str(a.type)) for a in func._schema.arguments]
    arg_names = [a.name for a in func._schema.arguments]
    n_pos = sum(1 for a in elem._schema.arguments if not a.kwarg_only)
    kw_only = [a.name for a in elem._schema.arguments if a.kwarg_only]

    plain = base != "norm" and "scalars" not in arg_names   # every element call is (list items, others)
    fusable = [None]   # the element op's lowered OpInfo when elements can share one node, else False

    def h(args, kwargs):
        n = next(len(a) for a, is_list in zip(args, arg_is_list) if is_list)
        if plain and len(args) <= n_pos:
            # the hot case (an optimizer's _foreach_add_ / _foreach_mul_): the per-element
            # arguments picked by position, the keywords as they are
            flags = arg_is_list[:len(args)]
            calls = [(tuple([a[i] if is_list else a for a, is_list in zip(args, flags)]), kwargs)
                     for i in range(n)]
        else:
            calls = [_foreach_element(args, kwargs, i) for i in range(n)]
        if fusable[0] is None:
            fusable[0] = _fusable(elem, inplace)
        if fusable[0] and n > 1:
            out = _trace_foreach(fusable[0], calls, inplace)
            if out is not _UNFUSED:
                return out
        eh = handler_of(elem)
        outs = [eh(a, k) for a, k in calls]
        return None if inplace else outs

    def _foreach_element(args, kwargs, i):
        ai = []
        for a, is_list, nm in zip(args, arg_is_list, arg_names):
            if is_list:
                ai.append(a[i])
            elif nm == "scalars" and isinstance(a, torch.Tensor):
                ai.append(a[i].item())
            else:
                ai.append(a)
        kw = dict(kwargs)
        if base == "norm" and len(ai) > 1:
            kw = {"ord": ai[1], **({"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {})}
            ai = ai[:1]
        elif len(ai) > n_pos:
            kw.update(zip(kw_only, ai[n_pos:]))
            ai = ai[:n_pos]
        return tuple(ai), kw
    return h


_UNFUSED = object()


def _fusable(elem, inplace):
    """The OpInfo a `_foreach_` call's elements can be traced with as one node (see
    _trace_foreach): the element op's own lowering when its handler is the plain
    lowered one (for an in-place op, its functional twin's, with one tensor
    result), else False."""
    if inplace:
        twin = _functional_twin(elem)
        return (twin is not None and _lowered_twin(twin, _mutated_args(elem._schema))) or False
    return getattr(handler_of(elem), "_lowered", None) or False


def _trace_foreach(info, calls, inplace):
    """The elements of a `_foreach_` call as ONE node (each element's own entry,
    so values equal element-wise tracing): an optimizer's update over 150
    parameters is a dozen nodes, not 1,800, to trace, key and walk at the
    barrier. An in-place call fuses only when every target is a distinct whole
    tensor (or an alias of one) that no other element reads (element-wise order
    would show) and keeps its shape and dtype; else -> _UNFUSED and the caller
    goes element by element."""
    if inplace:
        targets = set()
        add = targets.add
        Base = state.Base
        for args, _ in calls:
            t = args[0]
            if type(t) is not XLATensor:
                return _UNFUSED
            s = t._lazy
            if type(s) is not Base:
                if s.chain:   # a window on a tensor (an alias of a whole one, a Parameter, is fine)
                    return _UNFUSED
                s = s.base
            add(id(s))
        if len(targets) != len(calls):
            return _UNFUSED
        for args, kwargs in calls:
            target = args[0]
            for a in args:
                if type(a) is XLATensor and a is not target:
                    s = a._lazy
                    if id(s if type(s) is Base else s.base) in targets:
                        return _UNFUSED
            if kwargs:
                for a in kwargs.values():
                    if type(a) is XLATensor:
                        return _UNFUSED
    # None also for a promotion or broadcast eager refuses: element-wise, in its words
    got = tracing.trace_fused(info, calls, inplace)
    if got is None:
        return _UNFUSED
    node, entries = got
    if not inplace:
        return [new_base((node, i), e.out_avals[0]) for i, e in enumerate(entries)]
    for i, (args, _) in enumerate(calls):
        views.assign(args[0], (node, i))
    return None


def _inplace_view_handler(func, twin):
    """transpose_, t_, squeeze_, unsqueeze_, as_strided_, ...: the tensor becomes
    the view its functional twin makes (views.take_view)."""
    def h(args, kwargs):
        return views.take_view(args[0], call(twin, args, kwargs))
    return h


def make_handler(func):
    # indexing ops also trace an "indices in range" flag (index_checks.py)
    inner = _make_handler(func)
    h = index_checks.wrap(func, inner)
    name = func.overloadpacket.__name__
    # ops traced through make_entry are diagnosed there, on a memo miss (the hot
    # path pays nothing); decompositions and composites, which fail elsewhere,
    # and the ops checked before they run, get a wrapper
    if name in checks.ALWAYS or (name in checks.CHECKS and getattr(inner, "_untraced", False)):
        h = checked(func, name, h)
    return h


def checked(func, name, h):
    """Run `h`; when the call fails (or, for the ops checks.ALWAYS lists, before
    it runs) a registered check may explain the failure in upstream's words. The
    user's line goes in a note, so the message itself is upstream's."""
    op = func.name().split("::")[-1]

    def fail(args, kwargs, msg):
        return tracing.with_note(RuntimeError(msg), tracing.tracing_note(op, args, kwargs))

    if name in checks.ALWAYS:
        def run_always(args, kwargs):
            msg = checks.diagnose(name, args, kwargs)
            if msg is not None:
                raise fail(args, kwargs, msg)
            return h(args, kwargs)
        return run_always

    def run(args, kwargs):
        try:
            return h(args, kwargs)
        except Exception:
            msg = checks.diagnose(name, args, kwargs)
            if msg is None:
                raise
        raise fail(args, kwargs, msg)
    return run


def _make_handler(func):
    h = registry.HANDLERS.get(func) or registry.HANDLERS.get(func.overloadpacket)
    if h is not None:
        return h
    schema = func._schema
    if torch.Tag.inplace_view in func.tags:
        twin = _functional_twin(func)
        if twin is None and schema.name.split("::")[-1] in ("swapdims_", "swapaxes_"):
            twin = aten.transpose.int
        if twin is not None:
            return _inplace_view_handler(func, twin)
    if schema.name.startswith("aten::_foreach_"):
        return _foreach_handler(func)
    if _is_view(schema) and (op_info(func).lowering is not None
                             or not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")):
        # view ops with no lowering (to.dtype, movedim, ...) decompose below
        return views.make_view_handler(op_info(func))
    mut = _mutated_args(schema)
    if mut:
        twin = _functional_twin(func)
        if twin is not None:
            if mut == [0] and func._schema.arguments[0].name == "self" and not schema.name.endswith(".out"):
                if not any(a.kwarg_only and a.alias_info and a.alias_info.is_write for a in schema.arguments):
                    return _inplace_handler(func, twin)
            if all(schema.arguments[i].kwarg_only for i in mut):
                return _out_handler(func, twin)
        return fallback.handler(func)
    info = op_info(func)
    if info.lowering is not None:
        return functional_handler(info)
    decomp = _decomposition(func)
    if decomp is not None:
        return _decomp_handler(func, decomp)
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return _composite(func)
    return fallback.handler(func)
