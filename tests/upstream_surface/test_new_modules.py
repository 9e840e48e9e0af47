"""Upstream modules added for upstream's own tests: xla_env_vars, xla_builder /
xla_op_registry, call_jax, stablehlo, experimental.{gru, callback,
gradient_accumulation, deprecation}. Each result is compared with eager PyTorch."""
import logging

import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_builder as xb
import torch_xla.core.xla_env_vars as xenv
import torch_xla.core.xla_op_registry as xor

DEV = torch_xla.device()


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a.cpu() if isinstance(a, torch.Tensor) else a, b,
                               atol=tol, rtol=tol)


def test_env_var_names():
    assert xenv.PJRT_DEVICE == "PJRT_DEVICE"
    assert xenv.TPU_MESH_CTLER_ADDR == "TPU_MESH_CONTROLLER_ADDRESS"
    assert xenv.CPU_NUM_DEVICES == "CPU_NUM_DEVICES"


def test_experimental_is_an_attribute():
    assert hasattr(torch_xla, "experimental")


def test_op_registry_arith_and_mixed_tuple():
    op = xor.register("mixed", lambda a, b: xb.Op.tuple((a * b + a, (a - b).cast(xb.Type.BF16))))
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    r, c = op(a.to(DEV), b.to(DEV))
    close(r, a * b + a)
    assert c.dtype == torch.bfloat16
    close(c.float(), (a - b).bfloat16().float(), tol=1e-2)


@pytest.mark.parametrize("k0", [0.1, 0.9])
def test_op_registry_conditional(k0):
    def fn(k, a, b, k0=None):
        pred = k > xb.Op.scalar(k.builder(), k0, dtype=k.shape().dtype)
        return pred.mkconditional((a, b), lambda x, y: x + y, lambda x, y: x - y)
    op = xor.register("cond", fn)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    out = op(torch.tensor(0.2).to(DEV), a.to(DEV), b.to(DEV), k0=k0)
    close(out, a + b if 0.2 > k0 else a - b)


def test_op_registry_while_and_triangular_solve():
    def body_fn(a, b, limit=None):
        s32 = xb.Type.S32
        cond = lambda i, x, y: i < xb.Op.scalar(i.builder(), limit, dtype=s32)  # noqa: E731
        body = lambda i, x, y: xb.Op.tuple((i + xb.Op.scalar(i.builder(), 1, dtype=s32), x + y, y))  # noqa: E731
        zero = xb.Op.scalar(a.builder(), 0, dtype=s32)
        return xb.Op.mkwhile((zero, a, b), cond, body).get_tuple_element(1)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    close(xor.register("loop", body_fn)(a.to(DEV), b.to(DEV), limit=10), a + 10 * b, tol=1e-4)

    A = torch.randn(3, 3).triu() + 3 * torch.eye(3)
    B = torch.randn(3, 2)
    solve = xor.register("solve", lambda b, A: A.triangualr_solve(b, True, False, False, False))
    close(solve(B.to(DEV), A.to(DEV)), torch.linalg.solve_triangular(A, B, upper=True), tol=1e-4)


def test_type_map_round_trip():
    for t in xb._XLA_PT_TYPE_MAP:
        assert xb.Op.from_torch_type(xb.Op.to_torch_type(t)) == t


def test_call_jax_pytrees_and_static_args():
    import jax.numpy as jnp
    a, b = torch.randn(4), torch.randn(4)

    def f(x, d, scale):
        return {"s": jnp.sin(x) * scale + d["y"], "m": jnp.max(d["y"])}
    out = xb.call_jax(f, (a.to(DEV), {"y": b.to(DEV)}, 3.0))
    close(out["s"], torch.sin(a) * 3.0 + b)
    close(out["m"], b.max())
    # the jitted function is cached by the argument structure and static values
    before = len(xb._JAX_TO_XLA_COMPUTATION_CACHE)
    xb.call_jax(f, (a.to(DEV), {"y": b.to(DEV)}, 3.0))
    assert len(xb._JAX_TO_XLA_COMPUTATION_CACHE) == before


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.register_buffer("shift", torch.tensor([1.0, -1.0, 0.5, 2.0]))

    def forward(self, x, y):
        return torch.tanh(self.lin(x)) + self.shift, (x * y).sum(dim=1)


def test_stablehlo_export_runs_and_matches(tmp_path):
    from torch_xla.stablehlo import StableHLOGraphModule, exported_program_to_stablehlo, save_as_stablehlo
    m = _Net()
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    ep = torch.export.export(m, (x, y))
    shlo = exported_program_to_stablehlo(ep)
    ref = m(x, y)
    out = shlo(x, y)
    close(out[0].detach(), ref[0].detach())
    close(out[1], ref[1])
    text = shlo.get_stablehlo_text()
    assert "func.func" in text and "stablehlo." in text and "tensor<5x3xf32>" in text
    assert isinstance(shlo.get_stablehlo_bytecode(), bytes)

    save_as_stablehlo(ep, str(tmp_path / "m"))
    assert (tmp_path / "m" / "functions" / "forward.mlir").read_text() == text
    again = StableHLOGraphModule.load(str(tmp_path / "m"))
    close(again(x, y)[1], ref[1])


def test_gradient_accumulation_matches_manual_loop():
    from torch_xla.experimental.gradient_accumulation import gradient_accumulation
    torch.manual_seed(0)
    ref = nn.Linear(4, 2)
    model = nn.Linear(4, 2).to(DEV)
    model.load_state_dict(ref.state_dict())
    xs, ts = torch.randn(3, 4), torch.randn(3, 2)

    def step(x, t, c):
        return nn.functional.mse_loss(model(x), t), c + 1
    loss, count = gradient_accumulation(step, (xs.to(DEV), ts.to(DEV)), model,
                                        torch.tensor(0).to(DEV))
    total = 0.0
    for i in range(3):
        l_ = nn.functional.mse_loss(ref(xs[i]), ts[i]) / 3
        l_.backward()
        total = total + l_.detach()
    close(loss, total)
    assert count.item() == 3
    close(model.weight.grad, ref.weight.grad)

    def mutating(x, t, c):
        c += 1
        return nn.functional.mse_loss(model(x), t), c
    with pytest.raises(AssertionError):
        gradient_accumulation(mutating, (xs.to(DEV), ts.to(DEV)), model, torch.tensor(0).to(DEV))
    with pytest.raises(ValueError):
        gradient_accumulation(step, [], model)


def test_deprecation_helpers(caplog):
    from torch_xla.experimental.deprecation import deprecated, mark_deprecated
    import sys

    def new_fn():
        return 42
    old = deprecated(sys.modules[__name__], new_fn, "old_name")
    with caplog.at_level(logging.WARNING):
        assert old() == 42
    assert "old_name" in caplog.text

    @mark_deprecated(new_fn)
    def legacy():
        return 0
    with caplog.at_level(logging.WARNING):
        assert legacy() == 42
    assert "legacy" in caplog.text and "new_fn" in caplog.text


def test_callback_and_debug_info():
    from torch_xla.experimental import callback
    t = torch.ones(8, device=DEV) * 3
    torch_xla.sync()
    seen = []
    ev = callback.on_ready_event(t)
    assert ev.wait(10)
    import threading
    done = threading.Event()
    callback.on_ready_callback(t, lambda x: (seen.append(x), done.set()))
    assert done.wait(10) and seen[0] is t
    info = torch_xla._XLAC._get_xla_tensor_debug_info(t)
    assert "Data Shape: f32[8]" in info and "IR: None" in info
    assert "XLAData: None" in torch_xla._XLAC._get_xla_tensor_debug_info(t + 1)


def test_gru_class_matches_torch():
    from torch_xla.experimental.gru import GRU
    torch.manual_seed(0)
    ref = nn.GRU(4, 6, num_layers=2)
    g = GRU(4, 6, num_layers=2)
    assert isinstance(g, GRU)
    assert type(GRU(4, 6, bidirectional=True)) is not GRU
    g.load_state_dict(ref.state_dict())
    g = g.to(DEV)
    x = torch.randn(5, 2, 4)
    o_ref, h_ref = ref(x)
    o, h = g(x.to(DEV))
    close(o.detach(), o_ref.detach())
    close(h.detach(), h_ref.detach())


def test_user_computation():
    a, b = torch.tensor([1.0, 5.0, -2.0]), torch.tensor([3.0, 2.0, -1.0])
    fn = lambda x, y: xb.Op.tuple([xb.Op.max(x, y) - xb.Op.min(x, y)])  # noqa: E731
    comp = xb.create_computation("absdiff", fn, [xb.tensor_shape(a), xb.tensor_shape(b)])
    out = torch_xla._XLAC._xla_user_computation("xla::absdiff", [a.to(DEV), b.to(DEV)], comp)
    close(out[0], (a - b).abs())
    assert "stablehlo" in xb.get_computation_hlo(comp)
    with pytest.raises(RuntimeError, match="expected at least 1 input tensor"):
        torch_xla._XLAC._xla_user_computation("xla::absdiff", [], comp)


def test_a_user_computation_made_again_compiles_once():
    import torch
    import torch_xla
    import torch_xla.core.xla_builder as xb
    import torch_xla.debug.metrics as met

    def fn_op(a, b):
        return xb.Op.tuple([xb.Op.max(a, b) - xb.Op.min(a, b)])

    x = torch.tensor(10.0).to("xla")
    torch_xla.sync()
    met.clear_all()
    for _ in range(2):
        inputs = [torch.sin(x), torch.cos(x)]
        comp = xb.create_computation("computation", fn_op, [xb.tensor_shape(p) for p in inputs])
        out = torch_xla._XLAC._xla_user_computation("xla::computation", inputs, comp)
        torch_xla.sync()
    assert met.counter_value("UncachedCompile") == 1 and met.counter_value("CachedCompile") == 1
    torch.testing.assert_close(out[0].cpu(), (torch.sin(torch.tensor(10.0)) - torch.cos(torch.tensor(10.0))).abs())


def test_private_runtime_functions_upstream_tests_call():
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met
    x = torch.tensor((0, 1, 2, 0, 3, 4), device="xla")
    n = torch_xla._XLAC._get_xla_tensor_dimension_size(torch.nonzero(x), 0)
    assert n.dtype == torch.int32 and n.device.type == "xla" and n.item() == 4
    revs = torch_xla._XLAC._get_git_revs()
    assert revs["xla"] and revs["torch"] == torch.__version__
    fresh = not torch_xla._XLAC._registered
    before = met.counter_value("RegisterXLAFunctions") or 0
    torch_xla._XLAC._init_xla_lazy_backend()
    torch_xla._XLAC._init_xla_lazy_backend()
    # registered once per process: the first call counts, any later one does not
    assert (met.counter_value("RegisterXLAFunctions") or 0) - before == (1 if fresh else 0)
    assert torch_xla._XLAC._registered
    assert torch_xla._XLAC._unsafe_buffer_pointer(torch.ones(4, device="xla")) > 0
    a, b = torch_xla._XLAC._xla_tensors_from_aten([torch.ones(2), torch.zeros(3)], ["xla:0", "xla:0"])
    assert a.device.type == b.device.type == "xla" and b.shape == (3,)


def test_flattened_input_func_and_xla_callable():
    import torch
    import torch_xla.core.xla_builder as xb
    f = xb.FlattenedInputFunc(lambda d, l: {"s": d["a"]["b"] + l[2][1], "k": l[0]})
    x, y = torch.ones(2), torch.full((2,), 3.0)
    flat = f.preprocess(({"a": {"b": x}}, [7, 0, [0, y]]))
    assert len(flat) == 2   # the tensors only; 7 and the zeros are kept aside
    out = f.postprocess(f.flat_call(flat))
    assert out["k"] == 7 and torch.equal(out["s"], x + y)

    def sin_plus(a, b):
        return xb.Op.sin(a) + b
    call = xb.XlaCallable(sin_plus)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    for _ in range(2):   # the second call reuses the built computation
        res = call(a.to("xla"), b.to("xla"))
    torch.testing.assert_close(res.cpu(), torch.sin(a) + b)
    assert len(call._cache) == 1
