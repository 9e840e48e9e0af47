"""Run one program on both devices, shrink a failing one, print a standalone repro."""
import gc
import os
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import torch  # noqa: E402

import torch_xla  # noqa: E402

from fuzz_compare import compare, signature  # noqa: E402
from fuzz_gen import VALUE_ERRORS, _static_overflow, generate, guards_ok  # noqa: E402
from fuzz_program import Program, compile_program, execute, factory_values  # noqa: E402

DEV = torch_xla.device()


def _settle():
    """Leave no pending work behind (a program's tensors are gone by now; a full
    gc.collect() would cost more than the program)."""
    gc.collect(0)
    try:
        torch_xla.sync()
        return True
    except Exception:  # noqa: BLE001
        return False


def program_of(seed, exclude=()):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return generate(seed, exclude)


def run_pair(prog):
    """Findings of one program: eager CPU against the XLA device."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_pair(prog)


def _run_pair(prog):
    codes = compile_program(prog)
    xla = None
    eager = execute(prog, "cpu", None, codes, check=guards_ok)
    raised = {r.index for r in eager.raises}
    # a guard or the overlap rule need not hold for a statement eager refuses
    bad = [f"statement {k}: {why}" for k, why in eager.invalid if k not in raised]
    bad += [f"statement {r.index}: eager's error depends on the values: {r.msg}" for r in eager.raises
            if VALUE_ERRORS.search(f"{r.type}: {r.msg}") and not _static_overflow(r.msg, prog.stmts[r.index])]
    if bad:
        # not a test: eager's result is unspecified (a shrunk program can get here)
        return [{"kind": "invalid", "op": "", "detail": "; ".join(bad)}]
    xla = execute(prog, DEV, torch_xla.sync, codes)
    try:
        return compare(prog, eager, xla)
    except Exception as e:  # noqa: BLE001 -- the fuzzer's own bug: reported, never fatal
        return [{"kind": "harness", "op": "compare", "detail": f"{type(e).__name__}: {e}"}]
    finally:
        del eager, xla
        _settle()


# ----------------------------------------------------------------------------- shrinking
def _closure(prog, drop):
    """drop plus every statement that reads a name a dropped statement binds."""
    drop = set(drop)
    gone = set()
    for k, st in enumerate(prog.stmts):
        if k in drop:
            gone.update(st.defs)
        elif gone & set(st.uses):
            drop.add(k)
            gone.update(st.defs)
    return drop


def without(prog, drop):
    drop = _closure(prog, drop)
    keep = [k for k in range(len(prog.stmts)) if k not in drop]
    pos = {k: i for i, k in enumerate(keep)}
    p = Program(prog.seed, [prog.stmts[k].copy() for k in keep],
                {pos[k] for k in prog.barriers if k in pos}, prog.final_sync)
    return p


def _simpler_values(c):
    """Candidate value lists for a creation statement, simplest first."""
    vals = c["values"]
    dt = c["dtype"]
    zero = False if dt == torch.bool else (0 if dt not in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else 0.0)
    one = True if dt == torch.bool else (1 if isinstance(zero, int) else 1.0)
    out = [[zero] * len(vals), [one] * len(vals)]
    return [v for v in out if v != vals]


def shrink(prog, finding, budget_s=60.0, log=None):
    """The smallest program found (within budget_s) that still has a finding of the same
    signature, and that finding."""
    sig = signature(finding)
    t0 = time.time()
    best, best_f = prog, finding
    tries = 0

    def still(p):
        nonlocal tries
        tries += 1
        for f in run_pair(p):
            if signature(f) == sig:
                return f
        return None

    def accept(p):
        nonlocal best, best_f
        if time.time() - t0 > budget_s:
            return False
        f = still(p)
        if f is not None:
            best, best_f = p, f
            return True
        return False

    progress = True
    while progress and time.time() - t0 < budget_s:
        progress = False
        # barriers
        if best.barriers:
            p = best.copy()
            p.barriers = set()
            if accept(p):
                progress = True
            else:
                for b in sorted(best.barriers):
                    p = best.copy()
                    p.barriers.discard(b)
                    if accept(p):
                        progress = True
        if best.final_sync:
            p = best.copy()
            p.final_sync = False
            if accept(p):
                progress = True
        # statements: chunks, then one at a time (from the end: dependents go first)
        n = len(best.stmts)
        size = max(n // 2, 1)
        while size >= 1 and time.time() - t0 < budget_s:
            k = len(best.stmts) - size
            while k >= 0 and time.time() - t0 < budget_s:
                p = without(best, range(k, k + size))
                if len(p.stmts) < len(best.stmts) and accept(p):
                    progress = True
                    k = min(k, len(best.stmts)) - size
                else:
                    k -= size
            size //= 2
        # creation statements: plain literals, simpler values, smaller shapes, no grad
        for k, st in enumerate(best.stmts):
            if st.create is None or time.time() - t0 > budget_s:
                continue
            c = best.stmts[k].create
            if c["form"] not in ("lit", "to") and c["form"] != "full":
                p = best.copy()
                p.stmts[k].create["values"] = factory_values(c)
                p.stmts[k].create["form"] = "lit"
                if accept(p):
                    progress = True
            if best.stmts[k].create["grad"]:
                p = best.copy()
                p.stmts[k].create["grad"] = False
                if accept(p):
                    progress = True
            shape = tuple(best.stmts[k].create["shape"])
            for d in range(len(shape)):
                cur = best.stmts[k].create
                shp = tuple(cur["shape"])
                if shp[d] <= 1 or cur["form"] not in ("lit", "to"):
                    continue
                p = best.copy()
                new = shp[:d] + (1,) + shp[d + 1:]
                t = torch.tensor(cur["values"], dtype=torch.float64 if cur["dtype"] != torch.bool else torch.bool)
                t = t.reshape(shp).narrow(d, 0, 1)
                vals = t.flatten().tolist()
                p.stmts[k].create["shape"] = new
                p.stmts[k].create["values"] = [type(cur["values"][0])(v) for v in vals]
                if accept(p):
                    progress = True
            cur = best.stmts[k].create
            if cur["form"] not in ("lit", "to"):
                continue
            for vals in _simpler_values(cur):
                p = best.copy()
                p.stmts[k].create["values"] = vals
                if accept(p):
                    progress = True
                    break
            cur = best.stmts[k].create
            zero = _simpler_values(dict(cur, values=[None]))[0][0]
            for i in range(len(cur["values"])):
                if time.time() - t0 > budget_s:
                    break
                v = best.stmts[k].create["values"][i]
                if v == zero and str(v) == str(zero):
                    continue
                p = best.copy()
                p.stmts[k].create["values"][i] = zero
                if accept(p):
                    progress = True
    if log:
        log(f"shrunk {len(prog.stmts)} -> {len(best.stmts)} statements in {tries} runs, {time.time() - t0:.1f}s")
    return best, best_f


# ----------------------------------------------------------------------------- repro
def repro(prog, finding):
    """A standalone script: the program as a function of the device, run on both."""
    kind = finding["kind"]
    raised = {}
    if "index" in finding:
        raised[finding["index"]] = f"{kind}: {finding.get('sig', '')}"
    var = finding.get("var")
    if var and kind == "grad":
        ret = f'{{"{var}.grad": {var}.grad}}'
    elif var:
        ret = f'{{"{var}": {var}}}'
    else:
        ret = "{}"
    head = [f"# torch_xla fuzz seed {prog.seed}: {kind} at {finding.get('op')}"]
    head += ["#   " + line for line in finding.get("detail", "").splitlines()]
    lines = head + [
        "import torch",
        "import torch_xla",
        "inf, nan = float('inf'), float('nan')",
        "",
        "",
        "def program(DEV, sync):",
    ]
    lines += prog.body_lines(indent="    ", sync="sync()", raised=raised)
    if prog.final_sync:
        lines.append("    sync()")
    lines += [
        f"    return {ret}",
        "",
        "",
        "eager = program('cpu', lambda: None)",
        "xla = program(torch_xla.device(), torch_xla.sync)",
        "for k in eager:",
        "    x = xla[k].cpu() if isinstance(xla[k], torch.Tensor) else xla[k]",
        "    print(k, 'eager:', eager[k], '\\n   xla:  ', x)",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- one seed
def check_seed(seed, exclude=(), do_shrink=False, shrink_budget=60.0):
    t0 = time.time()
    prog = program_of(seed, exclude)
    findings = run_pair(prog)
    out = {"seed": seed, "stmts": len(prog.stmts), "findings": findings, "time": 0.0}
    if findings:
        f = findings[0]
        if do_shrink:
            small, f = shrink(prog, f, shrink_budget)
            out["shrunk_stmts"] = len(small.stmts)
            out["finding"] = f
            out["repro"] = repro(small, f)
        else:
            out["finding"] = f
            out["repro"] = repro(prog, f)
        out["signature"] = list(signature(f))
    out["time"] = time.time() - t0
    out["clean"] = _settle()
    return out


def worker_main(conn, exclude, do_shrink, shrink_budget):
    """A worker process: seeds in, result dicts out, until None."""
    while True:
        seed = conn.recv()
        if seed is None:
            return
        try:
            res = check_seed(seed, exclude, do_shrink, shrink_budget)
        except Exception as e:  # noqa: BLE001 -- the generator's or harness's own bug
            import traceback
            res = {"seed": seed, "findings": [{"kind": "harness", "op": "generate",
                                               "detail": traceback.format_exc()[-1500:]}],
                   "signature": ["harness", "generate", type(e).__name__], "clean": True}
            res["finding"] = res["findings"][0]
        conn.send(res)
