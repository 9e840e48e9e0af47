"""torch picks its foreach optimizer path for XLA tensors (as for upstream's plain
tensors on `xla`), and the foreach step equals eager PyTorch's on the CPU."""
import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach

import torch_xla
import torch_xla.core.xla_model as xm


def test_optimizers_default_to_foreach_on_xla():
    m = torch.nn.Linear(3, 2).to(torch_xla.device())
    assert _default_to_fused_or_foreach(list(m.parameters()), False, False) == (False, True)


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                                  lambda p: torch.optim.Adam(p, lr=0.01),
                                  lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True)],
                         ids=["sgd", "adam", "adamw"])
def test_foreach_step_matches_eager(make):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    dev = torch_xla.device()
    xla = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    xla.load_state_dict(cpu.state_dict())
    xla.to(dev)
    x, y = torch.randn(6, 5), torch.randn(6, 3)
    opt_c, opt_x = make(cpu.parameters()), make(xla.parameters())
    for _ in range(3):
        for m, opt, xs, ys in ((cpu, opt_c, x, y), (xla, opt_x, x.to(dev), y.to(dev))):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(xs), ys).backward()
            opt.step()
        xm.mark_step()
    for a, b in zip(cpu.parameters(), xla.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_inplace_fast_path_keeps_eager_refusals():
    dev = torch_xla.device()
    t = torch.zeros(3, dtype=torch.long, device=dev)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.add_(torch.ones(3, device=dev) * 0.5)
    with pytest.raises(RuntimeError):
        t.add_(torch.ones(2, 3, dtype=torch.long, device=dev))   # broadcast larger than self
    f = torch.ones(2, 3, device=dev)
    f.mul_(torch.tensor([1.0, 2.0, 3.0], device=dev))
    f.add_(torch.ones(3, device=dev), alpha=2)
    torch.testing.assert_close(f.cpu(), torch.tensor([[3.0, 4.0, 5.0]] * 2))


def _pair(*shapes, dtype=torch.float32):
    torch.manual_seed(0)
    cpu = [torch.randn(s).to(dtype) for s in shapes]
    return cpu, [t.to(torch_xla.device()) for t in cpu]


def _same(xs, cs):
    for x, c in zip(xs, cs):
        torch.testing.assert_close(x.cpu(), c)


def test_a_foreach_call_is_one_node_with_the_element_ops_counted():
    import torch_xla.debug.metrics as met
    from torch_xla.engine.ir.graph import Graph
    from torch_xla.engine.lazy import executor
    cs, xs = _pair((3,), (2, 2), (4,), (1,))
    gs, gx = _pair((3,), (2, 2), (4,), (1,))
    xm.mark_step()
    before = met.counter_value("xla::add") or 0
    torch._foreach_add_(xs, gx, alpha=0.5)
    torch._foreach_add_(cs, gs, alpha=0.5)
    assert (met.counter_value("xla::add") or 0) - before == 4
    g = Graph.capture(executor.pending_roots(xs))
    assert [n.entry.name for n in g.order] == ["foreach"]
    _same(xs, cs)


def test_a_repeated_foreach_call_reuses_its_node_entry_and_other_avals_get_their_own():
    from torch_xla.engine.lazy import state
    cs, xs = _pair((3,), (2, 2))
    c16, x16 = _pair((3,), (2, 2), dtype=torch.float16)
    cw, xw = _pair((5,), (2, 2))
    entries = []
    for c, x, k in ((cs, xs, 2.0), (c16, x16, 3.0), (cw, xw, 2.0), (cs, xs, 0.5)):
        torch._foreach_mul_(c, k)
        torch._foreach_mul_(x, k)
        entries.append(state.value_of(x[0])[0].entry)
        xm.mark_step()
        _same(x, c)
    # the same lists again (another scalar: an operand, not part of the key) share one entry
    assert entries[3] is entries[0]
    assert entries[1] is not entries[0] and entries[2] is not entries[0]


@pytest.mark.parametrize("name,fn", [
    # an element reads another element's target: element order shows, so element-wise
    ("crossed", lambda a, b: torch._foreach_add_([a[0], a[1]], [a[1], a[0]])),
    ("same target twice", lambda a, b: torch._foreach_mul_([a[0], a[0]], 3.0)),
    ("self operand", lambda a, b: torch._foreach_mul_(a, a)),
    ("view target", lambda a, b: torch._foreach_add_([a[0][1:], a[1]], [b[0][1:], b[1]])),
    ("scalar list", lambda a, b: torch._foreach_addcdiv_(a, b, b, [0.5, -2.0])),
    ("tensor scalars", lambda a, b: torch._foreach_mul_(a, torch.tensor(2.0))),
    ("lerp", lambda a, b: torch._foreach_lerp_(a, b, 0.25)),
])
def test_inplace_foreach_matches_eager(name, fn):
    ca, xa = _pair((3,), (3,))
    cb, xb = _pair((3,), (3,))
    fn(ca, cb)
    fn(xa, xb)
    _same(xa, ca)


def test_functional_foreach_gives_one_tensor_per_element():
    cs, xs = _pair((3,), (2, 5), (1,))
    want = torch._foreach_sqrt(torch._foreach_abs(cs))
    got = torch._foreach_sqrt(torch._foreach_abs(xs))
    assert len(got) == 3
    _same(got, want)


def test_inplace_foreach_keeps_eager_refusals():
    dev = torch_xla.device()
    ints = [torch.zeros(3, dtype=torch.long, device=dev), torch.zeros(2, dtype=torch.long, device=dev)]
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch._foreach_add_(ints, [torch.ones(3, device=dev), torch.ones(2, device=dev)])
