"""torch.autocast("xla") and torch_xla.amp.autocast: upstream's op policy.

Each case runs under autocast on the XLA device and checks (1) the output
dtype, (2) the dtype the op's node computes in, read from the traced IR text,
and (3) the value against eager CPU given the same casts by hand."""
import re

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.amp
from torch_xla.engine.lazy import autocast as policy

BF, F32 = torch.bfloat16, torch.float32
G = torch.Generator().manual_seed(0)


def r(*shape, dt=F32):
    return torch.randn(*shape, generator=G).to(dt)


def _ones_long(*shape):
    return torch.ones(*shape, dtype=torch.long)


# (name, function, CPU inputs, dtype the op runs in under bf16 autocast, IR op checked)
CASES = [
    # lower precision: float32 inputs run in bfloat16
    ("mm", torch.mm, (r(8, 8), r(8, 8)), BF, "mm"),
    ("bmm", torch.bmm, (r(2, 8, 8), r(2, 8, 8)), BF, "bmm"),
    ("matmul", torch.matmul, (r(8, 8), r(8, 8)), BF, "mm"),
    ("addmm", torch.addmm, (r(8, 8), r(8, 8), r(8, 8)), BF, "addmm"),
    ("baddbmm", torch.baddbmm, (r(2, 8, 8), r(2, 8, 8), r(2, 8, 8)), BF, "baddbmm"),
    ("addbmm", torch.addbmm, (r(8, 8), r(2, 8, 8), r(2, 8, 8)), BF, "addbmm"),
    ("linear", F.linear, (r(4, 8), r(6, 8), r(6)), BF, None),
    ("conv1d", F.conv1d, (r(2, 3, 8), r(4, 3, 3)), BF, "convolution"),
    ("conv2d", F.conv2d, (r(2, 3, 8, 8), r(4, 3, 3, 3)), BF, "convolution"),
    ("conv_transpose2d", F.conv_transpose2d, (r(2, 3, 8, 8), r(3, 4, 3, 3)), BF, "convolution"),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), (r(8, 8), r(8, 8)), BF, None),
    ("relu", torch.relu, (r(8),), BF, "relu"),
    ("prelu", F.prelu, (r(2, 4), r(1)), BF, None),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), (r(1, 2, 4, 4),), BF, None),
    ("sdpa", F.scaled_dot_product_attention, (r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)), BF, None),
    # float32: bfloat16 inputs run in float32
    ("softmax", lambda x: torch.softmax(x, -1), (r(4, 8, dt=BF),), F32, "_softmax"),
    ("log_softmax", lambda x: F.log_softmax(x, -1), (r(4, 8, dt=BF),), F32, "_log_softmax"),
    ("mse_loss", F.mse_loss, (r(4, 8, dt=BF), r(4, 8, dt=BF)), F32, "mse_loss"),
    ("l1_loss", F.l1_loss, (r(4, 8, dt=BF), r(4, 8, dt=BF)), F32, None),
    ("smooth_l1_loss", F.smooth_l1_loss, (r(4, 8, dt=BF), r(4, 8, dt=BF)), F32, None),
    ("cross_entropy", F.cross_entropy, (r(4, 8, dt=BF), torch.tensor([1, 0, 7, 3])), F32, "_log_softmax"),
    ("nll_loss", F.nll_loss, (r(4, 8, dt=BF), torch.tensor([1, 0, 7, 3])), F32, None),
    ("bce", F.binary_cross_entropy, (torch.rand(4, 8, generator=G).to(BF), torch.rand(4, 8, generator=G).to(BF)),
     F32, None),
    ("bce_logits", F.binary_cross_entropy_with_logits, (r(4, 8, dt=BF), torch.rand(4, 8, generator=G).to(BF)),
     F32, None),
    ("kl_div", lambda a, b: F.kl_div(a, b, reduction="batchmean"), (r(4, 8, dt=BF), torch.rand(4, 8, generator=G).to(BF)),
     F32, None),
    ("margin_ranking_loss", F.margin_ranking_loss, (r(8, dt=BF), r(8, dt=BF), torch.ones(8).to(BF)), F32, None),
    ("multi_margin_loss", F.multi_margin_loss, (r(4, 8, dt=BF), torch.tensor([1, 0, 7, 3])), F32, None),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), (r(4, 8, dt=BF),), F32, None),
    ("group_norm", lambda x: F.group_norm(x, 2), (r(2, 4, 3, dt=BF),), F32, None),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), (r(4, 3, dt=BF),), F32, None),
    ("exp", torch.exp, (r(8, dt=BF),), F32, "exp"),
    ("log", torch.log, (torch.rand(8, generator=G).to(BF) + 0.5,), F32, "log"),
    ("log1p", torch.log1p, (torch.rand(8, generator=G).to(BF),), F32, "log1p"),
    ("pow", lambda x: x.pow(2), (r(8, dt=BF),), F32, "pow"),
    ("prod", torch.prod, (r(8, dt=BF),), F32, None),
    ("norm", torch.norm, (r(8, dt=BF),), F32, None),
    ("cdist", torch.cdist, (r(4, 3, dt=BF), r(5, 3, dt=BF)), F32, None),
    ("logsumexp", lambda x: torch.logsumexp(x, -1), (r(4, 8, dt=BF),), F32, None),
    # promote: the widest floating input
    ("cat", lambda a, b: torch.cat([a, b]), (r(4, dt=BF), r(4)), F32, "cat"),
    ("stack", lambda a, b: torch.stack([a, b]), (r(4, dt=BF), r(4)), F32, None),
    ("index_copy", lambda a, b: a.index_copy(0, torch.tensor([0, 2]).to(a.device), b),
     (r(4, 3, dt=BF), r(2, 3)), F32, None),
]


def _to(args, device):
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


def _cast(args, dt):
    return tuple(a.to(dt) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def _ir_dtypes(text, op):
    """xla types of every node of aten::op in the IR text."""
    return re.findall(r"= (\w+)\[[^\]]*\][^ ]* aten::" + re.escape(op) + r"\(", text)


@pytest.mark.parametrize("name,fn,args,run_as,ir_op", CASES, ids=[c[0] for c in CASES])
def test_policy(dev, name, fn, args, run_as, ir_op):
    x = _to(args, dev)
    with torch.autocast("xla", dtype=torch.bfloat16):
        out = fn(*x)
        text = torch_xla._XLAC._get_xla_tensors_text([out])
    assert out.dtype == run_as, f"{name} ran in {out.dtype}"
    if ir_op is not None:
        want = {BF: "bf16", F32: "f32"}[run_as]
        kinds = _ir_dtypes(text, ir_op)
        assert kinds, f"no aten::{ir_op} in\n{text}"
        assert set(kinds) == {want}, text
    # the same computation by hand on the CPU: inputs cast to the policy's dtype
    ref = fn(*_cast(args, run_as))
    tol = dict(rtol=2e-2, atol=2e-2) if run_as == BF else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.cpu(), ref, **tol)


def test_policy_lists_cover_upstream():
    # upstream's lists, by name (AutocastXLA)
    for op in ("conv2d", "mm", "bmm", "linear", "matmul", "relu", "max_pool2d", "einsum"):
        assert policy.policy(op) == "lower"
    for op in ("softmax", "log_softmax", "mse_loss", "cross_entropy_loss", "nll_loss", "batch_norm",
               "binary_cross_entropy", "pow", "prod", "cdist", "kl_div", "linalg_inv_ex"):
        assert policy.policy(op) == "fp32"
    for op in ("cat", "stack", "index_copy"):
        assert policy.policy(op) == "promote"
    assert policy.policy("add") is None


def test_unlisted_and_float64_untouched(dev):
    a = torch.randn(4, 4, device=dev)
    d = torch.randn(4, 4, dtype=torch.float64, device=dev)
    with torch.autocast("xla"):
        assert (a + a).dtype == F32                    # not in any list
        assert torch.mm(d, d).dtype == torch.float64   # float64 is never cast
        assert torch.softmax(a.to(BF), -1, dtype=BF).dtype == BF   # an explicit dtype wins
        y = torch.mm(a, a)
        y.add_(1)                                      # in-place ops run as written
        assert y.dtype == BF


def test_disabled_and_nested(dev):
    a = torch.randn(4, 4, device=dev)
    with torch.autocast("xla"):
        assert torch.get_autocast_dtype("xla") == BF   # upstream's default for xla
        with torch.autocast("xla", enabled=False):
            assert torch.mm(a, a).dtype == F32
        assert torch.mm(a, a).dtype == BF
    assert torch.mm(a, a).dtype == F32


def test_amp_autocast_platform_dtype(dev):
    import torch_xla.runtime as xr
    a = torch.randn(4, 4, device=dev)
    with torch_xla.amp.autocast(dev):
        want = torch.float16 if xr.device_type() in ("CUDA", "GPU") else BF
        assert torch.get_autocast_dtype("xla") == want
        assert torch.mm(a, a).dtype == want
        assert torch.softmax(torch.mm(a, a), -1).dtype == F32
    with torch_xla.amp.autocast(dev, dtype=torch.float16):
        assert torch.mm(a, a).dtype == torch.float16
    with torch_xla.amp.autocast(dev, enabled=False):
        assert torch.mm(a, a).dtype == F32
    assert not torch.is_autocast_enabled("xla")


def test_backward_through_autocast_matches_cpu(dev):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(6, 8)
    t = torch.randn(6, 4)
    lx = torch.nn.Linear(8, 4).to(dev)
    lx.load_state_dict(lin.state_dict())
    with torch.autocast("xla"):
        loss = F.mse_loss(lx(x.to(dev)), t.to(dev))
    assert loss.dtype == F32
    loss.backward()
    # eager: the same casts by hand
    y = F.linear(x.to(BF), lin.weight.to(BF), lin.bias.to(BF))
    ref = F.mse_loss(y.float(), t)
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(lx.weight.grad.cpu(), lin.weight.grad, rtol=2e-2, atol=2e-2)
