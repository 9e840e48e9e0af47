"""Calls eager PyTorch refuses are refused on the XLA device too, with eager's
exception type and message (the differential fuzzer's exception findings, one
test per family). Every case computes eager's exception on the CPU first, then
expects the same type and first line on XLA tensors; the calls next to each
family that eager allows must keep running."""
import re

import pytest
import torch

import torch_xla
from _pairs import cpu as _cpu, to as _to
from torch_xla.engine.ops import checks

DEV = torch_xla.device()


def _eager_exc(fn, *args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    return eager.value


def _raises_like(fn, *args):
    """fn on XLA tensors raises eager's exception type with eager's first line."""
    eager = _eager_exc(fn, *args)
    with pytest.raises(type(eager), match=re.escape(str(eager).splitlines()[0])) as got:
        _cpu(fn(*_to(args, DEV)))
    assert type(got.value).__name__ != "LoweringError", got.value
    return got.value


def _same(fn, *args):
    """fn runs on XLA tensors as on the CPU (same values, dtype and shape)."""
    want = fn(*args)
    got = _cpu(fn(*_to(args, DEV)))
    if isinstance(want, torch.Tensor):
        want, got = [want], [got]
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        torch.testing.assert_close(g, w, equal_nan=True)


F = torch.tensor([[1.5, -2.0], [0.25, 3.0]])
H = F.half()
BF = F.bfloat16()
D = F.double()
L = torch.tensor([[1, 2], [3, 4]])
I32 = L.int()
U8 = L.to(torch.uint8)
B = torch.tensor([[True, False], [False, True]])
IDX = torch.tensor([0])


# -- 1. dtypes eager's CPU kernels refuse ------------------------------------------

nnf = torch.nn.functional

REFUSED = [
    ("bitwise_and_float", lambda a, b: a & b, (F, F)),
    ("bitwise_and_half_bool", lambda a, b: a & b, (H, B)),
    ("bitwise_or_double", torch.bitwise_or, (D, B)),
    ("bitwise_xor_scalar", lambda a: a.bitwise_xor(2), (F,)),
    ("bitwise_xor_scalar_tensor", lambda a: torch.bitwise_xor(2, a), (F,)),
    ("bitwise_not_float", torch.bitwise_not, (F,)),
    ("bitwise_or_inplace", lambda a, b: a.clone().bitwise_or_(b), (F, F)),
    ("ior_operator", lambda a, b: a.clone().__ior__(b), (BF, BF)),
    ("lshift_float", lambda a, b: a << b, (F, BF)),
    ("rshift_bool", torch.bitwise_right_shift, (B, B)),
    ("gcd_float", torch.gcd, (F, F)),
    ("softmax_long", lambda a: torch.softmax(a, 0), (L,)),
    ("softmax_long_lastdim", lambda a: torch.softmax(a, -1), (L,)),
    ("log_softmax_int", lambda a: nnf.log_softmax(a, dim=-2), (I32,)),
    ("log_softmax_bool", lambda a: nnf.log_softmax(a, dim=0), (B,)),
    ("gelu_long", nnf.gelu, (L,)),
    ("hardswish_long", nnf.hardswish, (L,)),
    ("hardsigmoid_long", nnf.hardsigmoid, (L,)),
    ("hardshrink_bool", nnf.hardshrink, (B,)),
    ("softshrink_long", nnf.softshrink, (L,)),
    ("logsigmoid_bool", nnf.logsigmoid, (B,)),
    ("mish_uint8", nnf.mish, (U8,)),
    ("silu_bool", nnf.silu, (B,)),
    ("elu_long", nnf.elu, (L,)),
    ("celu_bool", nnf.celu, (B,)),
    ("selu_bool", nnf.selu, (B,)),
    ("leaky_relu_uint8", nnf.leaky_relu, (U8,)),
    ("softplus_long", nnf.softplus, (L,)),
    ("lerp_long", lambda a: torch.lerp(a, a, 0.5), (L,)),
    ("lerp_tensor_weight_long", lambda a: torch.lerp(a, a, a), (L,)),
    ("hypot_long", torch.hypot, (L, L)),
    ("hypot_inplace_bool", lambda a: a.clone().hypot_(a), (B,)),
    ("nextafter_long", torch.nextafter, (L, L)),
    ("frac_long", torch.frac, (L,)),
    ("frac_inplace_bool", lambda a: a.clone().frac_(), (B,)),
    ("round_bool", torch.round, (B,)),
    ("ceil_inplace_bool", lambda a: a.clone().ceil_(), (B,)),
    ("floor_bool", torch.floor, (B,)),
    ("trunc_bool", torch.trunc, (B,)),
    ("abs_bool", torch.abs, (B,)),
    ("abs_inplace_bool", lambda a: a.clone().abs_(), (B,)),
    ("remainder_bool", torch.remainder, (B, B)),
    ("fmod_inplace_bool", lambda a: a.clone().fmod_(a), (B,)),
    ("floor_divide_bool", torch.floor_divide, (B, B)),
    ("median_bool", torch.median, (B,)),
    ("median_dim_bool", lambda a: torch.median(a, 0), (B,)),
    ("nanmedian_bool", torch.nanmedian, (B,)),
    ("kthvalue_bool", lambda a: torch.kthvalue(a, 2, 0), (B,)),
    ("clamp_bool_min_bool", lambda a: torch.clamp(a, min=True), (B,)),
    ("addcmul_inplace_bool", lambda a: a.clone().addcmul_(a, a), (B,)),
]


@pytest.mark.parametrize("name,fn,args", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_dtype_eager_refuses_is_refused(name, fn, args):
    err = _raises_like(fn, *args)
    assert isinstance(err, NotImplementedError)


@pytest.mark.parametrize("name,fn,args", [
    ("bitwise_and_int", lambda a, b: a & b, (L, I32)),
    ("bitwise_or_bool", lambda a, b: a | b, (B, B)),
    ("shift_int", lambda a: a << 1, (L,)),
    ("softmax_float", lambda a: torch.softmax(a, 0), (F,)),
    ("gelu_double", nnf.gelu, (D,)),
    ("round_long", torch.round, (L,)),
    ("ceil_long", torch.ceil, (L,)),
    ("abs_long", torch.abs, (L,)),
    ("remainder_long", torch.remainder, (L, L)),
    ("clamp_bool_int_bounds", lambda a: torch.clamp(a, 0, 1), (B,)),
    ("median_long", torch.median, (L,)),
    ("cumprod_bool", lambda a: torch.cumprod(a, 0), (B,)),
    ("softsign_long", nnf.softsign, (L,)),
])
def test_dtypes_eager_takes_still_run(name, fn, args):
    _same(fn, *args)


def test_a_half_type_only_the_cpu_kernels_lack_is_computed():
    # eager's CPU cdist refuses Half and BFloat16 but takes float32: a gap of the
    # CPU kernels, not a rule of the op, so the device computes it (as upstream)
    x = torch.rand(3, 2).half()
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch.cdist(x, x)
    got = torch.cdist(x.to(DEV), x.to(DEV)).cpu()
    torch.testing.assert_close(got.float(), torch.cdist(x.float(), x.float()), atol=2e-3, rtol=2e-3)


def test_a_probe_draws_nothing_from_the_cpu_generator():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    x = torch.rand(2, 3, device=DEV)
    torch.nn.functional.dropout(x, 0.5).cpu()
    torch.bernoulli(torch.full((4,), 0.5, device=DEV)).cpu()
    (x.softmax(-1) * 3).cpu()
    assert torch.equal(torch.get_rng_state(), state)


def test_a_large_result_from_size_arguments_is_not_computed_on_the_cpu(monkeypatch):
    # new_full's result is as large on stand-ins as on the device: not probed
    calls = []
    real = checks._refused

    def spy(op, *a, **k):
        calls.append(op)
        return real(op, *a, **k)

    monkeypatch.setattr(checks, "_refused", spy)
    x = torch.zeros(2, device=DEV)
    y = x.new_full((4096, 4096), 2.0)
    assert y.shape == (4096, 4096)
    assert torch.ops.aten.new_full.default not in calls


# -- 2. writes of a larger broadcast into self, values into an indexing result -----

Z3, Z23 = torch.zeros(3), torch.zeros(2, 3)


@pytest.mark.parametrize("name,fn,args", [
    ("copy_", lambda a, b: a.clone().copy_(b), (Z3, Z23)),
    ("copy_rank", lambda a, b: a.clone().copy_(b), (torch.zeros(3, 2, 5), torch.zeros(1, 3, 2, 5))),
    ("copy_incompatible", lambda a, b: a.clone().copy_(b), (Z23, torch.zeros(4))),
    ("eq_", lambda a, b: a.clone().eq_(b), (Z3, Z23)),
    ("lt_", lambda a, b: a.clone().lt_(b), (Z3, Z23)),
    ("fmod_", lambda a, b: a.clone().fmod_(b), (torch.ones(2), torch.ones(3, 0, 2))),
    ("pow_", lambda a, b: a.clone().pow_(b), (Z3, Z23)),
    ("remainder_", lambda a, b: a.clone().remainder_(b), (Z3 + 1, Z23 + 1)),
    ("atan2_", lambda a, b: a.clone().atan2_(b), (Z3, Z23)),
    ("clamp_min_", lambda a, b: a.clone().clamp_min_(b), (Z3, Z23)),
    ("clamp_max_", lambda a, b: a.clone().clamp_max_(b), (Z3, Z23)),
    ("floor_divide_", lambda a, b: a.clone().floor_divide_(b), (Z3 + 1, Z23 + 1)),
    ("bitwise_or_", lambda a, b: a.clone().bitwise_or_(b), (L[0], L)),
    ("lerp_", lambda a, b: a.clone().lerp_(b, 0.5), (torch.zeros(1), torch.zeros(3, 2))),
    ("addmm_", lambda a, b, c: a.clone().addmm_(b, c), (Z3, torch.zeros(2, 2), Z23)),
])
def test_a_larger_broadcast_is_not_written_into_self(name, fn, args):
    _raises_like(fn, *args)


def test_copy_from_the_cpu_checks_the_broadcast_too():
    eager = _eager_exc(lambda: torch.zeros(3).copy_(torch.zeros(2, 3)))
    with pytest.raises(RuntimeError, match=re.escape(str(eager))):
        torch.zeros(3, device=DEV).copy_(torch.zeros(2, 3))
    t = torch.zeros(2, 3, device=DEV)
    t.copy_(torch.arange(3.))                       # broadcasts, as in eager
    assert torch.equal(t.cpu(), torch.arange(3.).expand(2, 3))


def _put(x, idx, v):
    x = x.clone()
    x[idx] = v
    return x


MASK = torch.tensor([False, True, True, True, True])


@pytest.mark.parametrize("name,args", [
    ("int_index", (torch.zeros(3, 3), torch.tensor([0]), torch.zeros(2, 1))),
    ("int_index_rows", (torch.zeros(5, dtype=torch.float64), torch.tensor([1, 2]), torch.zeros(3, dtype=torch.float64))),
    ("leading_mask", (torch.zeros(5, dtype=torch.float64), MASK, torch.zeros(2, 1, dtype=torch.float64))),
    ("full_mask_nothing_selected", (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4, dtype=torch.bool), torch.zeros(2, 1))),
    ("dtype_int_index", (torch.zeros(5, dtype=torch.float64), torch.tensor([1, 2]), torch.zeros(2).half())),
    ("dtype_leading_mask", (torch.zeros(5, dtype=torch.float64), MASK, torch.zeros(4).half())),
    ("dtype_long_float", (torch.zeros(3, dtype=torch.long), torch.tensor([0]), torch.tensor(1.5))),
])
def test_setitem_checks_the_values_as_eager(name, args):
    _raises_like(_put, *args)


def test_setitem_runs_where_eager_does():
    _same(_put, torch.zeros(3, 3), torch.tensor([0, 1]), torch.ones(2, 3))
    _same(_put, torch.zeros(5, dtype=torch.float64), MASK, torch.tensor(2.0).half())  # one value: a fill
    _same(_put, torch.zeros(5, dtype=torch.float64), MASK, torch.arange(4.).double())
    _same(_put, torch.zeros(2, 3), torch.tensor([[True, False, True], [False, False, True]]), torch.ones(3))


# -- 3. out= tensors ------------------------------------------------------------------

def _out(dtype, *shape):
    return lambda dev: torch.zeros(*shape, dtype=dtype, device=dev)


@pytest.mark.parametrize("name,fn,args", [
    ("floor_half_into_bf16", lambda x: torch.floor(x, out=torch.zeros(2, 2, dtype=torch.bfloat16, device=x.device)), (H,)),
    ("neg_into_uint8", lambda x: torch.neg(x, out=torch.zeros(2, 2, dtype=torch.uint8, device=x.device)), (F,)),
    ("mm_into_double", lambda x: torch.mm(x, x, out=torch.zeros(2, 2, dtype=torch.float64, device=x.device)), (F,)),
    ("where_into_double", lambda x: torch.where(x > 0, x, x, out=torch.zeros(2, 2, dtype=torch.float64, device=x.device)), (F,)),
    ("maximum_into_long", lambda x, y: torch.maximum(x, y, out=torch.zeros(2, 2, dtype=torch.long, device=x.device)), (F, D)),
    ("clamp_into_long", lambda x: torch.clamp(x, 0, 1, out=torch.zeros(2, 2, dtype=torch.long, device=x.device)), (F,)),
    ("cat_into_long", lambda x: torch.cat([x], out=torch.zeros(2, 2, dtype=torch.long, device=x.device)), (F,)),
    ("stack_into_int", lambda x: torch.stack([x], out=torch.zeros(1, 2, 2, dtype=torch.int32, device=x.device)), (F,)),
    ("floor_refused_dtype_first", lambda x: torch.floor(x, out=torch.zeros(2, 2, dtype=torch.long, device=x.device)), (B,)),
])
def test_an_out_tensor_of_a_dtype_eager_refuses(name, fn, args):
    _raises_like(fn, *args)


def test_an_out_tensor_eager_casts_into_still_works():
    _same(lambda x: torch.add(x, 1, out=torch.zeros(2, 2, dtype=torch.float64, device=x.device)), F)
    _same(lambda x: torch.cat([x], out=torch.zeros(2, 2, dtype=torch.float64, device=x.device)), F)
    _same(lambda x: torch.sum(x, 0, out=torch.zeros(2, dtype=torch.float64, device=x.device)), F)


def _select_into_view(x):
    x = x.clone()
    return torch.index_select(x, 0, torch.tensor([0, 1], device=x.device), out=x[1:3])


@pytest.mark.parametrize("name,fn", [
    ("index_select", _select_into_view),
    ("add_partial", lambda x: _add_partial(x)),
    ("cat", lambda x: _cat_overlap(x)),
    ("gather", lambda x: _gather_overlap(x)),
    ("where_out_is_an_input_of_another_shape", lambda x: _where_into_input(x)),
])
def test_an_out_tensor_sharing_memory_with_an_input(name, fn):
    _raises_like(fn, torch.arange(6.))


def _add_partial(x):
    x = x.clone()
    return torch.add(x[:3], 1, out=x[1:4])


def _cat_overlap(x):
    x = x.clone()
    return torch.cat([x[:2], x[2:4]], out=x[:4])


def _gather_overlap(x):
    x = x.clone()
    return torch.gather(x, 0, torch.tensor([0, 1], device=x.device), out=x[1:3])


def _where_into_input(x):
    y = x.sum()
    return torch.where(x.view(2, 3) > 0, x.view(2, 3), y, out=y)


def test_overlaps_eager_allows_still_run():
    def same_memory(x):
        x = x.clone()
        torch.abs(x, out=x)                              # the whole tensor: elementwise
        torch.sum(x[:3].view(1, 3), 0, out=x[3:])        # one storage, no shared element
        torch.index_select(x[:2], 0, torch.tensor([1, 0], device=x.device), out=x[4:])
        return x
    _same(same_memory, torch.arange(6.) - 3)


# -- 4. checks the meta kernels skip -----------------------------------------------------

@pytest.mark.parametrize("name,fn,args", [
    ("index_add_dtype", lambda x, s: x.clone().index_add_(0, torch.zeros(1, dtype=torch.long, device=x.device), s),
     (torch.zeros(3), torch.ones(1, dtype=torch.int32))),
    ("index_add_functional", lambda x, s: torch.index_add(x, 0, torch.zeros(1, dtype=torch.long, device=x.device), s),
     (torch.zeros(3), torch.ones(1).bfloat16())),
    ("index_copy_dtype", lambda x, s: x.clone().index_copy_(0, torch.zeros(1, dtype=torch.long, device=x.device), s),
     (torch.zeros(3, dtype=torch.long), torch.ones(1))),
    ("heaviside_dtypes", torch.heaviside, (F, H)),
    ("topk_bool", lambda b: torch.topk(b.flatten(), 3), (B,)),
    ("topk_bool_small_k", lambda b: torch.topk(b, 1), (B,)),
    ("addcdiv_long", lambda a: torch.addcdiv(a, a, a), (L,)),
    ("add_float_alpha_long", lambda a: torch.add(a, a, alpha=0.5), (L,)),
    ("cat_0d", lambda a: torch.cat([a.sum(), a.sum()]), (F,)),
])
def test_dtype_and_rank_checks(name, fn, args):
    _raises_like(fn, *args)


@pytest.mark.parametrize("name,fn", [
    ("fill_uint8", lambda d: torch.zeros(2, dtype=torch.uint8, device=d).fill_(300)),
    ("fill_int8_float", lambda d: torch.zeros(2, dtype=torch.int8, device=d).fill_(255.5)),
    ("full_uint8", lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d)),
    ("full_int8", lambda d: torch.full((2,), -129, dtype=torch.int8, device=d)),
    ("full_float_default", lambda d: torch.full((2,), 1e40, device=d)),
    ("full_half_pair", lambda d: torch.full((2,), 70000., dtype=torch.float16, device=d)),
    ("full_like_uint8", lambda d: torch.full_like(torch.zeros(2, dtype=torch.uint8, device=d), 300)),
    ("new_full_uint8", lambda d: torch.zeros(2, dtype=torch.uint8, device=d).new_full((2,), 300)),
    ("setitem_uint8", lambda d: _put(torch.zeros(2, dtype=torch.uint8, device=d), 0, 300)),
])
def test_a_number_that_overflows_the_dtype(name, fn):
    eager = _eager_exc(fn, "cpu")
    with pytest.raises(RuntimeError, match=re.escape(str(eager))):
        _cpu(fn(DEV))


@pytest.mark.parametrize("name,fn", [
    ("fill_uint8_negative", lambda d: torch.zeros(2, dtype=torch.uint8, device=d).fill_(-1)),
    ("full_half_single", lambda d: torch.full((1,), 70000., dtype=torch.float16, device=d)),
    ("full_inf", lambda d: torch.full((2,), float("inf"), dtype=torch.float16, device=d)),
    ("fill_bool", lambda d: torch.zeros(2, dtype=torch.bool, device=d).fill_(5)),
])
def test_a_number_eager_converts(name, fn):
    torch.testing.assert_close(_cpu(fn(DEV)), fn("cpu"), equal_nan=True)


E = torch.zeros(0, 3)


@pytest.mark.parametrize("name,fn", [
    ("max_dim", lambda t: torch.max(t, 0)),
    ("min_dim", lambda t: torch.min(t, 0)),
    ("amin", lambda t: torch.amin(t, 0)),
    ("amax", lambda t: torch.amax(t, (0, 1))),
    ("argmax", lambda t: torch.argmax(t, 0)),
    ("argmin", lambda t: torch.argmin(t, 0)),
    ("kthvalue", lambda t: torch.kthvalue(t, 1, 0)),
    ("median", lambda t: torch.median(t, 0)),
    ("nanmedian", lambda t: torch.nanmedian(t, 0)),
    ("aminmax", lambda t: torch.aminmax(t, dim=0)),
    ("max_all", lambda t: torch.max(t)),
    ("argmax_all", lambda t: torch.argmax(t)),
])
def test_a_reduction_over_an_empty_dim(name, fn):
    err = _raises_like(fn, E)
    if isinstance(err, IndexError):
        assert isinstance(err, RuntimeError)   # torch_xla's DimensionError: upstream's type too


def test_reductions_over_a_non_empty_dim_of_an_empty_tensor_run():
    _same(lambda t: torch.max(t, 1), E)
    _same(lambda t: torch.amin(t, 1), E)
    _same(lambda t: torch.sum(t, 0), E)


def test_softmax_of_an_empty_bool_tensor_is_empty():
    _same(lambda t: torch.softmax(t, 0), torch.zeros(0, dtype=torch.bool))
    _same(lambda t: torch.log_softmax(t, 1), torch.zeros(2, 0, dtype=torch.long))
