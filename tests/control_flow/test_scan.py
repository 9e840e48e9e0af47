"""scan and scan_layers: the same values and gradients as the Python loop,
one loop body in the compiled program."""
import copy
import re

import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental.scan import scan
from torch_xla.experimental.scan_layers import scan_layers


def _loop(fn, init, xs):
    carry, ys = init, []
    for i in range(len(xs)):
        carry, y = fn(carry, xs[i])
        ys.append(y)
    return carry, torch.stack(ys)


def _whiles(tensors):
    return len(re.findall(r"\swhile\(", torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))))


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.cpu() if a.device.type != "cpu" else a, b, rtol=tol, atol=tol)


def test_scan_values_and_grads(dev):
    def fn(c, x):
        c = c * 0.9 + torch.tanh(x)
        return c, (c * x).sum(-1)

    torch.manual_seed(0)
    init = torch.randn(3, 4)
    xs = torch.randn(6, 3, 4)
    i1, x1 = init.clone().requires_grad_(), xs.clone().requires_grad_()
    c, ys = _loop(fn, i1, x1)
    (c.pow(2).sum() + ys.sum()).backward()

    i2 = init.to(dev).requires_grad_()
    x2 = xs.to(dev).requires_grad_()
    c2, ys2 = scan(fn, i2, x2)
    assert _whiles([c2, ys2]) == 1
    (c2.pow(2).sum() + ys2.sum()).backward()
    xm.mark_step()
    _close(c2, c.detach())
    _close(ys2, ys.detach())
    _close(i2.grad, i1.grad)
    _close(x2.grad, x1.grad)


def test_scan_pytrees_and_closed_over_weight(dev):
    torch.manual_seed(1)
    w = torch.randn(4, 4)
    b = torch.randn(4)

    def make_fn(w, b):
        def fn(carry, x):
            h, n = carry
            h = torch.tanh(h @ w + x["a"] * x["b"] + b)
            return (h, n + 1), {"h": h, "s": h.sum()}
        return fn

    h0 = torch.randn(2, 4)
    xa, xb = torch.randn(5, 2, 4), torch.randn(5, 1, 4)
    w1, b1, h1 = w.clone().requires_grad_(), b.clone().requires_grad_(), h0.clone().requires_grad_()
    carry, ys = (h1, torch.tensor(0)), []
    fn1 = make_fn(w1, b1)
    for i in range(5):
        carry, y = fn1(carry, {"a": xa[i], "b": xb[i]})
        ys.append(y)
    loss = carry[0].sum() + torch.stack([y["h"] for y in ys]).pow(2).sum() + torch.stack([y["s"] for y in ys]).sum()
    loss.backward()

    w2, b2 = w.to(dev).requires_grad_(), b.to(dev).requires_grad_()
    h2 = h0.to(dev).requires_grad_()
    (hc, n), ys2 = scan(make_fn(w2, b2), (h2, torch.tensor(0, device=dev)),
                        {"a": xa.to(dev), "b": xb.to(dev)})
    loss2 = hc.sum() + ys2["h"].pow(2).sum() + ys2["s"].sum()
    loss2.backward()
    xm.mark_step()
    assert n.item() == 5
    _close(loss2, loss.detach())
    _close(ys2["h"], torch.stack([y["h"] for y in ys]).detach())
    for got, want in ((w2.grad, w1.grad), (b2.grad, b1.grad), (h2.grad, h1.grad)):
        _close(got, want, 1e-4)


def test_scan_y_none_and_errors(dev):
    c, ys = scan(lambda c, x: (c + x, None), torch.zeros(3, device=dev), torch.ones(4, 3, device=dev))
    assert ys is None
    _close(c, torch.full((3,), 4.0))
    with pytest.raises(ValueError, match="same shapes"):
        scan(lambda c, x: (c.sum(), x), torch.zeros(3, device=dev), torch.ones(4, 3, device=dev))
    with pytest.raises(ValueError, match="leading dimension"):
        scan(lambda c, x: (c, x), torch.zeros(3, device=dev), (torch.ones(4, 3, device=dev), torch.ones(2, device=dev)))
    kept = []
    with pytest.raises(RuntimeError, match="alive"):
        scan(lambda c, x: (kept.append(c * 2) or c, x), torch.zeros(3, device=dev), torch.ones(4, 3, device=dev))
    kept.clear()
    xm.mark_step()


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, d, n, scanned):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 1)
        self.scanned = scanned

    def forward(self, x):
        if self.scanned:
            x = scan_layers(self.layers, x)
        else:
            for layer in self.layers:
                x = layer(x)
        return self.head(x).pow(2).mean()


def _train(model, data, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(data)
        loss.backward()
        opt.step()
        xm.mark_step()
        losses.append(loss.item())
    return losses


def test_scan_layers_forward_one_loop(dev):
    torch.manual_seed(0)
    layers = [Block(8) for _ in range(8)]
    x = torch.randn(4, 8)
    want = nn.Sequential(*layers)(x)
    xla_layers = [copy.deepcopy(layer).to(dev) for layer in layers]
    out = scan_layers(xla_layers, x.to(dev))
    assert _whiles([out]) == 1
    _close(out, want.detach(), 1e-4)


def _hlo_ops(tensors):
    text = torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))
    return sum(1 for line in text.splitlines() if " = " in line)


def test_scan_layers_trains_like_unrolled_with_one_body(dev):
    torch.manual_seed(0)
    base = Stack(32, 8, scanned=False)
    data = torch.randn(16, 32)
    unrolled = copy.deepcopy(base).to(dev)
    scanned = copy.deepcopy(base).to(dev)
    scanned.scanned = True
    xdata = data.to(dev)

    # the step graph (forward and backward) holds one layer body: it grows with
    # depth only by the stacking of weights, the unrolled one by whole layers
    sizes = {}
    for n in (2, 8):
        for scan_it in (False, True):
            m = Stack(32, n, scanned=scan_it).to(dev)
            loss = m(xdata)
            loss.backward()
            sizes[(n, scan_it)] = _hlo_ops([loss] + [p.grad for p in m.parameters()])
            del m, loss
            xm.mark_step()
    grow_unrolled = sizes[(8, False)] - sizes[(2, False)]
    grow_scanned = sizes[(8, True)] - sizes[(2, True)]
    assert grow_scanned * 4 < grow_unrolled, sizes

    met.clear_all()
    l_unrolled = _train(unrolled, xdata)
    t_unrolled = met.metric_data("CompileTime")[1]
    met.clear_all()
    l_scanned = _train(scanned, xdata)
    t_scanned = met.metric_data("CompileTime")[1]

    torch.testing.assert_close(l_scanned, l_unrolled, rtol=1e-4, atol=1e-5)
    for p, q in zip(scanned.parameters(), unrolled.parameters()):
        _close(p, q.cpu(), 1e-4)
    # XLA:CPU compiles the loop kernels slowly (see README): the compile time is
    # reported, not bounded
    print(f"CompileTime unrolled {t_unrolled / 1e9:.2f}s, scan_layers {t_scanned / 1e9:.2f}s")


class Encoder(nn.Module):
    """A stack of identical transformer layers (batch first, so
    attention projects a non-contiguous activation), unrolled or one scan_layers."""

    def __init__(self, n, scanned, d=32):
        super().__init__()
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.0, batch_first=True)
                                    for _ in range(n))
        self.scanned = scanned

    def forward(self, x):
        if self.scanned:
            return scan_layers(self.layers, x)
        for layer in self.layers:
            x = layer(x)
        return x


def _largest(tensors):
    text = torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))
    sizes = [1]
    for dims in re.findall(r"[fs]\d+\[([\d,]+)\]", text):
        n = 1
        for k in dims.split(","):
            n *= int(k)
        sizes.append(n)
    return max(sizes)


def test_scan_layers_transformer_of_8_layers_has_one_loop_body_and_trains_like_unrolled(dev):
    torch.manual_seed(0)
    base = Encoder(8, scanned=False)
    data = torch.randn(2, 8, 32)
    xdata = data.to(dev)
    unrolled = copy.deepcopy(base).to(dev)
    scanned = copy.deepcopy(base).to(dev)
    scanned.scanned = True

    # forward: one while; forward + backward: one loop each way, whatever the depth
    assert _whiles([scanned(xdata)]) == 1
    loss = scanned(xdata).pow(2).mean()
    loss.backward()
    assert _whiles([loss] + [p.grad for p in scanned.parameters()]) == 2
    # nothing the loops carry is bigger than the layers' own values stacked: the
    # body decomposes `linear` as a layer outside a loop does (one mm with the
    # weight), not as a batched matmul over a weight expanded per sequence position
    one = Encoder(1, scanned=False).to(dev)
    one_loss = one(xdata).pow(2).mean()
    one_loss.backward()
    biggest_one = _largest([one_loss] + [p.grad for p in one.parameters()])
    assert _largest([loss] + [p.grad for p in scanned.parameters()]) <= 8 * biggest_one
    del loss, one, one_loss
    for p in scanned.parameters():
        p.grad = None
    xm.mark_step()

    want = base(data)
    _close(scanned(xdata), want.detach(), 1e-4)
    l_unrolled = _train(_Loss(unrolled), xdata, steps=3)
    l_scanned = _train(_Loss(scanned), xdata, steps=3)
    torch.testing.assert_close(l_scanned, l_unrolled, rtol=1e-4, atol=1e-5)
    for p, q in zip(scanned.parameters(), unrolled.parameters()):
        _close(p, q.cpu(), 1e-4)


class _Loss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).pow(2).mean()


def test_tree_flatten_none_drops_and_restores_nones():
    from torch_xla.experimental.scan import tree_flatten_none
    flat, unflatten = tree_flatten_none(((1, 2), (None, 3), None))
    assert flat == [1, 2, 3]
    assert unflatten([4, 5, 6]) == ((4, 5), (None, 6), None)


def test_value_and_grad_partitioned_matches_autograd():
    from torch_xla.experimental.scan import value_and_grad_partitioned
    dev = torch_xla.device()

    def fn(carry, x):
        h = torch.tanh(carry["h"] @ x["w"] + x["b"])
        return {"h": h}, h.sum(1)

    g = torch.Generator().manual_seed(0)
    init = {"h": torch.randn(2, 3, generator=g)}
    x = {"w": torch.randn(3, 3, generator=g), "b": torch.randn(3, generator=g)}
    forward, alias_input, backward = value_and_grad_partitioned(
        fn, {k: v.to(dev) for k, v in init.items()}, {k: v.unsqueeze(0).to(dev) for k, v in x.items()})
    xd = {k: v.to(dev) for k, v in x.items()}
    carry_d = {k: v.to(dev) for k, v in init.items()}
    new_carry, (y, partial) = forward(carry_d, xd)
    acts = alias_input(partial, xd)
    gc, gx = backward({"h": torch.ones(2, 3, device=dev)}, (torch.ones(2, device=dev), acts))
    # eager CPU autograd of the same step
    c = {k: v.clone().requires_grad_() for k, v in init.items()}
    xx = {k: v.clone().requires_grad_() for k, v in x.items()}
    nc, yy = fn(c, xx)
    torch.autograd.backward([nc["h"], yy], [torch.ones(2, 3), torch.ones(2)])
    torch.testing.assert_close(new_carry["h"].cpu(), nc["h"].detach())
    torch.testing.assert_close(y.cpu(), yy.detach())
    torch.testing.assert_close(gc["h"].cpu(), c["h"].grad)
    for k in ("w", "b"):
        torch.testing.assert_close(gx[k].cpu(), xx[k].grad)


def test_pure_fn_is_traced_once_per_signature():
    import torch_xla.experimental.scan as scan_module
    calls = []

    def fn(carry, x):
        calls.append(1)
        return carry + x, x * 2

    dev = torch_xla.device()
    init, xs = torch.zeros(2, device=dev), torch.arange(6.).reshape(3, 2).to(dev)
    for _ in range(4):
        c, ys = scan_module.scan(fn, init, xs, is_fn_pure=True)
    assert len(calls) == 2   # one step checked by value_and_grad_partitioned, one loop body traced
    assert fn in scan_module._SCAN_COMPUTATION_CACHE
    torch.testing.assert_close(c.cpu(), torch.tensor([6., 9.]))
    torch.testing.assert_close(ys.cpu(), torch.arange(6.).reshape(3, 2) * 2)
    scan_module.scan(fn, init, xs, is_fn_pure=False)
    assert len(calls) == 3   # not pure: traced every time


def test_a_rematerializing_partitioner_keeps_only_the_carry_and_gives_the_same_grads():
    from functorch.compile import min_cut_rematerialization_partition
    import torch_xla
    from torch_xla.experimental.scan import scan

    torch.manual_seed(0)
    w0 = torch.randn(6, 8, 8)
    h0 = torch.randn(4, 8)

    def fn(h, w):
        h = torch.tanh(h @ w) * torch.sigmoid(h)
        return h, h.sum(-1)

    results = {}
    for name, pf in (("default", None), ("remat", min_cut_rematerialization_partition)):
        w = w0.to("xla").requires_grad_()
        h = h0.to("xla").requires_grad_()
        c, ys = scan(fn, h, w, partition_fn=pf)
        (c.sum() + ys.pow(2).sum()).backward()
        hlo = torch_xla._XLAC._get_xla_tensors_hlo([w.grad, h.grad])
        loops = [line.split(" while(")[0] for line in hlo.splitlines() if " while(" in line]
        results[name] = (w.grad.cpu(), h.grad.cpu(), sum(x.count("f32[") for x in loops))
    torch.testing.assert_close(results["remat"][0], results["default"][0])
    torch.testing.assert_close(results["remat"][1], results["default"][1])
    assert results["remat"][2] < results["default"][2]   # fewer loop-carried (stacked) residuals


def test_random_ops_in_fn_draw_new_numbers_each_iteration_and_call():
    # torch.rand inside fn stays inside the loop body with its seed moved per
    # iteration; a second call takes fresh seeds; manual_seed reproduces both
    from torch_xla.experimental.scan import scan as xscan
    d = torch_xla.device()

    def fn(c, x):
        return c + x, x + torch.rand(3, device=d)

    def run():
        _, ys = xscan(fn, torch.zeros(3, device=d), torch.zeros(4, 3, device=d))
        return ys.cpu()

    torch_xla.manual_seed(7)
    a, b = run(), run()
    assert len({tuple(r.tolist()) for r in a}) == 4           # every iteration differs
    assert not torch.equal(a, b)                              # so does the next call
    assert ((a >= 0) & (a < 1)).all()
    torch_xla.manual_seed(7)
    torch.testing.assert_close(run(), a)                      # and the seed reproduces them


def test_dropout_in_scan_keeps_gradients():
    from torch_xla.experimental.scan import scan as xscan
    d = torch_xla.device()
    w = torch.randn(3, device=d, requires_grad=True)
    xs = torch.ones(5, 3, device=d)

    def fn(c, x):
        y = torch.nn.functional.dropout(x * w, p=0.5, training=True)
        return c + y, y

    c, ys = xscan(fn, torch.zeros(3, device=d), xs)
    c.sum().backward()
    kept = (ys.detach().cpu() != 0).float()
    # d(sum_i dropout(x*w))/dw = sum_i mask_i * 2 (p=0.5), per iteration's own mask
    torch.testing.assert_close(w.grad.cpu(), 2 * kept.sum(0))


def test_writing_into_a_closed_over_tensor_is_refused():
    # the write would run once (hoisted out of the loop), not once per iteration:
    # refuse it rather than return a silent wrong answer. torch.tensor(..., device=)
    # makes an alias of a base, so the check follows views to their base
    from torch_xla.experimental.scan import scan as xscan
    d = torch_xla.device()
    counter = torch.tensor([0.0, 0.0], device=d)

    def fn(c, x):
        counter.add_(1.0)
        return c + x, c + counter

    with pytest.raises(RuntimeError, match="writes in place into a tensor of shape \\[2\\]"):
        xscan(fn, torch.zeros(2, device=d), torch.zeros(3, 2, device=d))


def test_index_op_inside_the_body_then_a_barrier(dev):
    # an indexing op traces its range check where it runs: inside a body the
    # check is over the body's inputs and must not reach the step's graph
    table_cpu = torch.randn(10, 3)
    table = table_cpu.to(dev)

    def fn(c, x):
        row = torch.index_select(table, 0, x.reshape(1))[0]
        return c + row, row.sum()

    c, ys = scan(fn, torch.zeros(3, device=dev), torch.tensor([1, 2, 3, 9], device=dev))
    torch_xla.sync()
    rows = table_cpu[[1, 2, 3, 9]]
    torch.testing.assert_close(c.cpu(), rows.sum(0))
    torch.testing.assert_close(ys.cpu(), rows.sum(1))
