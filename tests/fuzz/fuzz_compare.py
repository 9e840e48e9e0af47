"""Compare an eager run with an XLA run of one program.

Findings are dicts with a `kind`, the statement `op` they point at, and a `detail`.
Kinds:
  crash        the XLA run raised where eager did not (a statement, a barrier, a read
               of the results); process deaths and timeouts are crashes too (run.py)
  missing_raise  eager raised at a statement, the XLA run did not
  exc_type     both raised at the same statement, with different exception types (an
               instance of eager's type is accepted, LoweringError excepted: accepted_subclass)
  shape, dtype, device, requires_grad, value, signed_zero, grad, pyvalue
               a live variable (or a leaf's .grad) differs after the program

Only the first divergence of the two runs' raises is reported (after it the runs'
variables are not comparable); values are compared when the raises agree.
"""
import math

import torch

from fuzz_program import FLOATS

# (rtol, atol) per dtype: torch.testing's defaults
TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


# ops whose zero results have a sign eager does not specify (a sum's or a dot product's
# accumulator, which of two equal zeros a max or a sort returns): programs with one of them
# are not checked for signed zeros
SIGN_FREE = {
    "sum", "mean", "prod", "nansum", "nanmean", "cumsum", "cumprod", "logsumexp", "std", "var",
    "var_mean", "std_mean", "norm", "vector_norm", "amax", "amin", "max", "min", "aminmax",
    "cummax", "cummin", "median", "nanmedian", "kthvalue", "sort", "msort", "topk", "mm", "bmm",
    "matmul", "addmm", "baddbmm", "einsum", "dot", "mv", "outer", "linear", "scatter_add_",
    "scatter_add", "scatter_reduce", "scatter_reduce_", "index_add_", "index_put_", "index_put",
    "put_", "sum_out", "mm_out", "cumsum_out", "setitem_add", "maximum", "minimum", "fmax", "fmin",
    "clamp", "clamp_min_", "clamp_max_", "clamp_out", "maximum_out", "hardtanh", "relu", "relu_",
    "relu6", "backward",
}


_HALF_TOKENS = {torch.float16: ("float16", ".half()"), torch.bfloat16: ("bfloat16",)}


def half_lineage(prog):
    """var -> the half dtypes its value went through (created in, cast to): its floats
    are compared at that precision (a float32 cast of a float16 result carries the
    float16 rounding)."""
    lin = {}
    for st in prog.stmts:
        own = set()
        if st.create is not None:
            if st.create["dtype"] in _HALF_TOKENS:
                own.add(st.create["dtype"])
        else:
            for dt, toks in _HALF_TOKENS.items():
                if any(t in st.code for t in toks):
                    own.add(dt)
        for u in st.uses:
            own |= lin.get(u, set())
        for n in tuple(st.defs) + tuple(st.touches):
            lin[n] = lin.get(n, set()) | own
    return lin


def last_writers(prog):
    """var -> op of the last statement that bound it or may have changed it."""
    w = {}
    for st in prog.stmts:
        for n in tuple(st.defs) + tuple(st.touches):
            w[n] = st.op
    return w


def signature(f):
    """What the shrinker keeps: the kind, the op, and for raises the exception types."""
    return (f["kind"], f.get("op", ""), f.get("sig", ""))


def _raise_key(r):
    return (r.index, 0 if r.where == "stmt" else 1)


# exceptions that subclass eager's type but are never its answer: a lowering that
# failed is a bug of ours, whatever RuntimeError eager raised there
NOT_ACCEPTED = {"LoweringError"}


def accepted_subclass(er, xr):
    """Whether the XLA run's exception stands for eager's: an instance of eager's
    type (torch_xla's DimensionError is both IndexError, eager's, and
    RuntimeError, upstream torch_xla's, so scripts catching either keep working),
    except the classes NOT_ACCEPTED lists."""
    return er.type in xr.mro and xr.type not in NOT_ACCEPTED


def compare_raises(prog, eager, xla):
    e = {(_raise_key(r)): r for r in eager.raises}
    x = {(_raise_key(r)): r for r in xla.raises}
    for key in sorted(set(e) | set(x)):
        er, xr = e.get(key), x.get(key)
        k = key[0]
        op = prog.stmts[k].op if k < len(prog.stmts) else "final_sync"
        if er is not None and xr is None:
            return {"kind": "missing_raise", "op": op, "index": k, "sig": er.type,
                    "detail": f"eager raised {er.type}: {er.msg}; XLA did not"}
        if er is None:
            where = "at the barrier after" if xr.where == "barrier" else "at"
            return {"kind": "crash", "op": op if xr.where == "stmt" else "barrier", "index": k,
                    "sig": f"{xr.type}@{xr.frames.split(' < ')[0].rsplit(':', 1)[0]}",
                    "detail": f"XLA raised {where} statement {k}: {xr.type}: {xr.msg} [{xr.frames}]"}
        if er.type != xr.type and not accepted_subclass(er, xr):
            sub = " (a subclass)" if er.type in xr.mro else ""
            return {"kind": "exc_type", "op": op, "index": k, "sig": f"{er.type}->{xr.type}{sub}",
                    "detail": f"eager {er.type}: {er.msg} | XLA {xr.type}{sub}: {xr.msg}"}
    return None


def _fmt(t):
    t = t.detach()
    if t.numel() > 24:
        return f"{tuple(t.shape)} {t.dtype} [{', '.join(str(v) for v in t.flatten()[:24].tolist())}, ...]"
    return f"{tuple(t.shape)} {t.dtype} {t.tolist()}"


def tensor_diff(want, got, halves=()):
    """None if equal under the dtype's tolerance (or the loosest of `halves`, the half
    dtypes the value went through), else (kind, detail). `got` is on the CPU."""
    if want.shape != got.shape:
        return "shape", f"shape {tuple(want.shape)} vs {tuple(got.shape)}"
    if want.dtype != got.dtype:
        return "dtype", f"dtype {want.dtype} vs {got.dtype}"
    w, g = want.detach(), got.detach()
    if w.numel() == 0:
        return None
    if w.dtype not in FLOATS:
        if torch.equal(w, g):
            return None
        return "value", f"eager {_fmt(w)}\n  xla   {_fmt(g)}"
    rtol, atol = max([TOL[w.dtype]] + [TOL[h] for h in halves])
    w64, g64 = w.double(), g.double()
    both_nan = w64.isnan() & g64.isnan()
    fin = w64.isfinite() & g64.isfinite()
    close = (w64 == g64) | both_nan | (fin & ((w64 - g64).abs() <= atol + rtol * w64.abs()))
    if not bool(close.all()):
        bad = (~close).nonzero()[0].tolist()
        return "value", (f"eager {_fmt(w)}\n  xla   {_fmt(g)}\n  first at {bad}: "
                         f"{w64[tuple(bad)].item()!r} vs {g64[tuple(bad)].item()!r}")
    zeros = (w64 == 0) & (g64 == 0)
    if bool((zeros & (w64.signbit() != g64.signbit())).any()):
        return "signed_zero", f"eager {_fmt(w)}\n  xla   {_fmt(g)}"
    return None


def _num_diff(a, b, rtol=1e-3):
    if type(a) is not type(b):
        return f"{type(a).__name__} {a!r} vs {type(b).__name__} {b!r}"
    if isinstance(a, float):
        if math.isnan(a) and math.isnan(b):
            return None
        if a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-5 + rtol * abs(a)):
            return None
        return f"{a!r} vs {b!r}"
    return None if a == b else f"{a!r} vs {b!r}"


def compare_values(prog, eager, xla):
    writers = last_writers(prog)
    lineage = half_lineage(prog)
    every_half = set().union(*lineage.values()) if lineage else set()
    signed_zeros = not ({st.op for st in prog.stmts} & SIGN_FREE)
    out = []
    names = sorted(set(eager.ns) | set(xla.ns), key=lambda n: int(n[1:]))
    for n in names:
        op = writers.get(n, "?")
        if n not in eager.ns or n not in xla.ns:
            out.append({"kind": "missing_var", "op": op, "var": n,
                        "detail": f"{n} only in the {'eager' if n in eager.ns else 'XLA'} run"})
            continue
        w, g = eager.ns[n], xla.ns[n]
        if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
            out.append({"kind": "pyvalue", "op": op, "var": n,
                        "detail": f"{n}: eager {type(w).__name__}, XLA {type(g).__name__}"})
            continue
        if not isinstance(w, torch.Tensor):
            d = _num_diff(w, g, 1.6e-2 if torch.bfloat16 in lineage.get(n, ()) else 1e-3)
            if d:
                out.append({"kind": "pyvalue", "op": op, "var": n, "detail": f"{n}: {d}"})
            continue
        if g.device.type != "xla":
            out.append({"kind": "device", "op": op, "var": n, "detail": f"{n} is on {g.device}"})
            continue
        try:
            gc = g.detach().cpu()
        except Exception as e:  # noqa: BLE001
            out.append({"kind": "crash", "op": op, "var": n, "sig": f"{type(e).__name__}@read",
                        "detail": f"reading {n}: {type(e).__name__}: {str(e)[:300]}"})
            continue
        d = tensor_diff(w, gc, lineage.get(n, ()))
        if d and d[0] == "signed_zero" and not signed_zeros:
            d = None
        if d:
            out.append({"kind": d[0], "op": op, "var": n, "detail": f"{n}: {d[1]}"})
        if w.requires_grad != g.requires_grad:
            out.append({"kind": "requires_grad", "op": op, "var": n,
                        "detail": f"{n}.requires_grad {w.requires_grad} vs {g.requires_grad}"})
        if w.is_leaf and w.requires_grad:
            wg, gg = w.grad, g.grad
            if (wg is None) != (gg is None):
                out.append({"kind": "grad", "op": op, "var": n,
                            "detail": f"{n}.grad: eager {'None' if wg is None else _fmt(wg)}, "
                                      f"XLA {'None' if gg is None else 'a tensor'}"})
            elif wg is not None:
                try:
                    d = tensor_diff(wg, gg.detach().cpu(), every_half)
                except Exception as e:  # noqa: BLE001
                    d = ("crash", f"reading {n}.grad: {type(e).__name__}: {e}")
                if d and d[0] == "signed_zero":
                    d = None   # a gradient's zero sign follows autograd's accumulation order
                if d:
                    out.append({"kind": "grad" if d[0] != "crash" else "crash", "op": op, "var": n,
                                "detail": f"{n}.grad: {d[1]}"})
    return out


def compare(prog, eager, xla):
    f = compare_raises(prog, eager, xla)
    if f is not None:
        return [f]
    return compare_values(prog, eager, xla)
