"""The XLA device against eager CPU PyTorch over PyTorch's OpInfo database.

For every entry of `op_db` (op name + variant) and its FIRST sample input:
  forward  in float32, float64, int64 and bool (where the op supports the dtype
           on the CPU): run on the CPU and on the XLA device, compare;
  grad     in float32 where the op supports autograd: compare the input
           gradients for the same (seeded random) output cotangents.

Known misses live in one place, tests/ops/known_misses.py; they xfail
(strict=False). Any other case that stops matching FAILS.

Tiers: float32 forward + grad is the fast tier (default); float64 / int64 /
bool forward is marked `slow`. Both run in CI.

scripts/op_coverage.py runs the same cases (`run_case`) and writes
docs/reference/op_coverage.md.
"""
import contextlib
import math
import os
import sys
import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from known_misses import KNOWN_MISSES, SKIP  # noqa: E402

FORWARD_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "bool": torch.bool}
KEYS = ("float32", "grad", "float64", "int64", "bool")

# ops whose values are undefined: random (nondeterministic) and uninitialised memory
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "uniform",
    "rand_like", "randint", "randint_like", "randn", "randn_like", "svd_lowrank", "pca_lowrank",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
}
UNINITIALISED_OPS = {
    "empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
    "resize_", "resize_as_",
}


def excluded(op):
    if op.name in RANDOM_OPS or op.name in UNINITIALISED_OPS:
        return True
    return False


def _op_db():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def case_id(op, key):
    v = f".{op.variant_test_name}" if op.variant_test_name else ""
    return f"{op.name}{v}-{key}"


def applicable(op, key):
    """Whether (op, key) is a case at all (before running anything)."""
    if excluded(op):
        return False
    try:
        sup = op.supported_dtypes("cpu")
    except Exception:  # noqa: BLE001
        return False
    if key == "grad":
        return op.supports_autograd and torch.float32 in sup
    return FORWARD_DTYPES[key] in sup


def all_cases():
    out = []
    for op in _op_db():
        for key in KEYS:
            if applicable(op, key):
                out.append((op, key))
    return out


# ---------------------------------------------------------------------------
# running one case

class Skip(Exception):
    """The case has nothing to compare (no sample, CPU itself fails, no grads)."""


class Mismatch(AssertionError):
    pass


@contextlib.contextmanager
def _no_test_fn_lookup():
    """op.sample_inputs looks for the running unittest method with inspect.stack()
    (twice per call): under pytest that reads the source of every frame and
    costs more than the comparison itself. There is no such method here."""
    import torch.testing._internal.common_utils as cu
    import torch.testing._internal.opinfo.core as oc
    saved = cu.extract_test_fn, oc.extract_test_fn
    cu.extract_test_fn = oc.extract_test_fn = lambda: None
    try:
        yield
    finally:
        cu.extract_test_fn, oc.extract_test_fn = saved


def _first_sample(op, dtype, requires_grad):
    torch.manual_seed(0)
    try:
        with _no_test_fn_lookup():
            it = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
            return next(it)
    except StopIteration:
        raise Skip("no sample input") from None


def _xla():
    import torch_xla
    return torch_xla.device()


def _to_xla(x, dev, grad=False):
    def f(t):
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return t.to(dev)
            y = t.detach().to(dev)
            if grad and t.requires_grad:
                y.requires_grad_(True)
            return y
        if (isinstance(t, torch.device) and t.type == "cpu") or (isinstance(t, str) and t == "cpu"):
            return dev
        return t
    return tree_map(f, x)


# ops whose tensor arguments (other than the input) PyTorch wants on the CPU
CPU_ARGS = {"tensor_split"}


def _move(op, inp, args, kwargs, dev, grad=False):
    xin = _to_xla(inp, dev, grad)
    xargs = _clone_cpu(args, grad) if op.name in CPU_ARGS else _to_xla(args, dev, grad)
    xkw = _kwargs_to_xla(_to_xla(kwargs, dev, grad), dev)
    return xin, xargs, xkw


def _clone_cpu(x, grad=False):
    def f(t):
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return t.clone()
            y = t.detach().clone()
            if grad and t.requires_grad:
                y.requires_grad_(True)
            return y
        return t
    return tree_map(f, x)


def _kwargs_to_xla(kwargs, dev):
    kw = dict(kwargs)
    if kw.get("device") in ("cpu", torch.device("cpu")):
        kw["device"] = dev
    return kw


def _tol(dtype):
    if dtype in (torch.float16, torch.bfloat16, torch.complex32):
        return 1e-2, 1e-2
    if dtype in (torch.float32, torch.complex64):
        return 1e-3, 1e-3
    if dtype in (torch.float64, torch.complex128):
        return 1e-5, 1e-5
    return 0, 0


def compare(expected, actual, path="out"):
    """Raise Mismatch when the XLA result (moved to CPU) differs from eager CPU."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        if expected.layout != torch.strided:
            expected = expected.to_dense()
        if actual.layout != torch.strided:
            actual = actual.to_dense()
        if tuple(expected.shape) != tuple(actual.shape):
            raise Mismatch(f"{path}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
        if expected.dtype != actual.dtype:
            raise Mismatch(f"{path}: dtype {actual.dtype} != expected {expected.dtype}")
        rtol, atol = _tol(expected.dtype)
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False, check_stride=False, check_layout=False)
        except AssertionError as e:
            msg = str(e).strip().splitlines()
            raise Mismatch(f"{path}: " + " ".join(m.strip() for m in msg[:4])) from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected a sequence of {len(expected)}, got {type(actual).__name__}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, f"{path}[{i}]")
        return
    if isinstance(expected, float) and isinstance(actual, float):
        if not (math.isclose(expected, actual, rel_tol=1e-3, abs_tol=1e-3)
                or (math.isnan(expected) and math.isnan(actual))):
            raise Mismatch(f"{path}: {actual} != expected {expected}")
        return
    if expected != actual:
        raise Mismatch(f"{path}: {actual!r} != expected {expected!r}")


def _to_cpu(x):
    return tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


def _sync():
    import torch_xla
    torch_xla.sync()


def prepare_forward(op, dtype):
    """Run the first sample on the CPU and (lazily) on XLA -> (expected, actual, path)."""
    sample = _first_sample(op, dtype, False)
    inp, args, kwargs = sample.input, sample.args, sample.kwargs
    try:
        expected_args = _clone_cpu((inp, args))
        expected = op(expected_args[0], *expected_args[1], **_clone_cpu(kwargs))
    except Exception as e:  # noqa: BLE001
        raise Skip(f"CPU raised {type(e).__name__}") from None
    dev = _xla()
    xin, xargs, xkw = _move(op, inp, args, kwargs, dev)
    actual = op(xin, *xargs, **xkw)
    return _to_cpu(expected), actual, "out"


def _grad_inputs(tree):
    leaves, _ = tree_flatten(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _grad_outputs(out):
    leaves, _ = tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


def _cotangents(outs):
    g = torch.Generator().manual_seed(1)
    cots = []
    for o in outs:
        if o.is_complex():
            cots.append(torch.complex(torch.randn(o.shape, generator=g), torch.randn(o.shape, generator=g)).to(o.dtype))
        else:
            cots.append(torch.randn(o.shape, generator=g, dtype=o.dtype))
    return cots


def prepare_grad(op):
    """Input gradients for seeded random cotangents, CPU and (lazily) XLA."""
    sample = _first_sample(op, torch.float32, True)
    proc = sample.output_process_fn_grad
    tree = (sample.input, sample.args, sample.kwargs)
    ctree = _clone_cpu(tree, grad=True)
    try:
        out = proc(op(ctree[0], *ctree[1], **ctree[2]))
        ins = _grad_inputs(ctree)
        outs = _grad_outputs(out)
        if not ins or not outs:
            raise Skip("nothing differentiable")
        cots = _cotangents(outs)
        expected = torch.autograd.grad(outs, ins, cots, allow_unused=True)
    except Skip:
        raise
    except Exception as e:  # noqa: BLE001
        raise Skip(f"CPU raised {type(e).__name__}") from None
    dev = _xla()
    xtree = _move(op, *tree, dev, grad=True)
    xout = proc(op(xtree[0], *xtree[1], **xtree[2]))
    xins = _grad_inputs(xtree)
    xouts = _grad_outputs(xout)
    if len(xouts) != len(outs):
        raise Mismatch(f"{len(xouts)} differentiable outputs, expected {len(outs)}")
    actual = torch.autograd.grad(xouts, xins, [c.to(dev) for c in cots], allow_unused=True)
    return list(expected), list(actual), "grad"


def _prepare(op, key):
    if key == "grad":
        return prepare_grad(op)
    return prepare_forward(op, FORWARD_DTYPES[key])


def run_case(op, key):
    """-> None when XLA matches the CPU; raises Skip, Mismatch or the XLA error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, actual, path = _prepare(op, key)
        _sync()
        compare(expected, _to_cpu(actual), path)


def _fallbacks():
    import torch_xla.debug.metrics as met
    return {n: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::")}


def _failure(e):
    if isinstance(e, Skip):
        return "skip", str(e)
    if isinstance(e, Mismatch):
        return "fail", f"mismatch: {e}"
    msg = str(e).strip().splitlines()
    return "fail", f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _passed():
    fb = _fallbacks()
    return "pass", ("fallback: " + " ".join(sorted(fb))) if fb else ""


def outcome(op, key):
    """-> ('pass' | 'fail' | 'skip', message) without raising. A pass that ran
    some aten op on the CPU fallback says which in its message."""
    import torch_xla.debug.metrics as met
    try:
        met.clear_counters()
        run_case(op, key)
        return _passed()
    except Exception as e:  # noqa: BLE001
        return _failure(e)
    finally:
        with contextlib.suppress(Exception):
            _sync()


def outcomes(op, keys):
    """outcome() for several keys of one op, traced together and compiled as ONE
    graph (one XLA compile instead of one per key). If that graph fails as a
    whole, every key is rerun on its own."""
    import torch_xla.debug.metrics as met
    res, pending, passed = {}, {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key in keys:
            met.clear_counters()  # fallbacks run while tracing: they belong to this key
            try:
                pending[key] = _prepare(op, key)
                passed[key] = _passed()
            except Exception as e:  # noqa: BLE001
                res[key] = _failure(e)
                with contextlib.suppress(Exception):
                    _sync()
        try:
            _sync()
        except Exception:  # noqa: BLE001
            for key in pending:
                res[key] = outcome(op, key)
            return res
        for key, (expected, actual, path) in pending.items():
            try:
                compare(expected, _to_cpu(actual), path)
                res[key] = passed[key]
            except Exception as e:  # noqa: BLE001
                res[key] = _failure(e)
    return res


# ---------------------------------------------------------------------------
# pytest

def _params():
    out = []
    for op, key in all_cases():
        k = (op.name, op.variant_test_name, key)
        if k in SKIP:
            continue
        marks = []
        if key in ("float64", "int64", "bool"):
            marks.append(pytest.mark.slow)
        if k in KNOWN_MISSES:
            marks.append(pytest.mark.xfail(reason=KNOWN_MISSES[k], strict=False))
        out.append(pytest.param(op, key, id=case_id(op, key), marks=marks))
    return out


FAST_KEYS = ("float32", "grad")
SLOW_KEYS = ("float64", "int64", "bool")
_results = {}


def _result(op, key):
    """Outcomes are computed per op and tier (one graph for its keys), then looked up."""
    tier = FAST_KEYS if key in FAST_KEYS else SLOW_KEYS
    k = (op.name, op.variant_test_name, tier)
    if k not in _results:
        _results.clear()
        keys = [t for t in tier if applicable(op, t) and (op.name, op.variant_test_name, t) not in SKIP]
        _results[k] = outcomes(op, keys)
    return _results[k][key]


@pytest.mark.parametrize("op,key", _params())
def test_op_matches_cpu(op, key):
    status, msg = _result(op, key)
    if status == "skip":
        pytest.skip(msg)
    assert status == "pass", f"{case_id(op, key)}: {msg}"
