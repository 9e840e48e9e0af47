"""Aliasing: every aten view op, mutated through the view and through the base,
must match eager PyTorch on the CPU, and every other view of the same base
must see the change."""
import warnings

import pytest
import torch

import torch_xla.core.xla_model as xm


def _base(dtype=torch.float32, shape=(4, 6)):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n).reshape(shape).to(dtype)


def _run_both(fn, dev, dtype=torch.float32, shape=(4, 6), read_view=True):
    """fn(base, is_xla) -> tensors; run on a CPU base and on an XLA copy, compare all."""
    cpu = _base(dtype, shape)
    xla = cpu.clone().to(dev)
    out_c = fn(cpu)
    out_x = fn(xla)
    assert len(out_c) == len(out_x)
    for x in out_x:
        assert x.device.type == "xla"
    # one graph for every output (fast), then the first one read as a view too
    snap = [x.clone() for x in out_x]
    xm.mark_step()
    for c, x, s in zip(out_c, out_x, snap):
        assert x.shape == c.shape and x.dtype == c.dtype
        got = s.cpu()
        assert torch.equal(got, c), f"\nCPU:\n{c}\nXLA:\n{got}"
    if read_view:
        assert torch.equal(out_x[-1].cpu(), out_c[-1])


# name -> view function of a (4, 6) base; multi-output ops take one output
VIEWS = {
    "view": lambda a: a.view(3, 8),
    "view_flat": lambda a: a.view(-1),
    "reshape": lambda a: a.reshape(2, 12),
    "view_as": lambda a: a.view_as(torch.empty(8, 3)),
    "flatten": lambda a: a.view(2, 2, 6).flatten(0, 1),
    "unflatten": lambda a: a.unflatten(1, (2, 3)),
    "transpose": lambda a: a.transpose(0, 1),
    "t": lambda a: a.t(),
    "permute": lambda a: a.view(2, 2, 6).permute(2, 0, 1),
    "movedim": lambda a: a.view(2, 2, 6).movedim(0, 2),
    "mT": lambda a: a.mT,
    "select": lambda a: a[1],
    "select_neg": lambda a: a.select(1, -2),
    "slice": lambda a: a[1:3],
    "slice_step": lambda a: a[:, 1::2],
    "slice_neg": lambda a: a[-3:-1, -4:],
    "narrow": lambda a: a.narrow(1, 2, 3),
    "diagonal": lambda a: a.diagonal(),
    "diagonal_off": lambda a: a.diagonal(2),
    "diagonal_neg": lambda a: a.diagonal(-1),
    "unsqueeze": lambda a: a.unsqueeze(1),
    "squeeze": lambda a: a[:1].squeeze(0),
    "squeeze_dims": lambda a: a.view(4, 1, 6, 1).squeeze((1, 3)),
    "unfold": lambda a: a.unfold(1, 2, 2),
    "unfold_gap": lambda a: a.unfold(1, 2, 3),
    "as_strided": lambda a: a.as_strided((2, 2), (1, 6), 1),
    "as_strided_of_slice": lambda a: a[1:].as_strided((3, 2), (2, 1)),
    "split": lambda a: a.split(2)[1],
    "split_sizes": lambda a: a.split([1, 3, 2], dim=1)[1],
    "chunk": lambda a: a.chunk(3, 1)[2],
    "unbind": lambda a: a.unbind(1)[3],
    "tensor_split": lambda a: a.tensor_split(3, dim=1)[1],
    "swapaxes": lambda a: a.swapaxes(0, 1),
    "indexing_mix": lambda a: a[None, 1:, 2],
    "ellipsis": lambda a: a[..., 3],
    # chains: views of views
    "chain_t_slice_diag": lambda a: a.t()[1:5].diagonal(),
    "chain_view_slice_select": lambda a: a.view(2, 12)[:, 3:9].reshape(2, 3, 2).select(2, 1),
    "chain_unbind_unsqueeze": lambda a: a.t().unbind(0)[2].unsqueeze(0)[:, 1:],
    "chain_split_t_narrow": lambda a: a.split(3, 1)[1].t().narrow(1, 1, 2),
    "chain_diag_of_permute": lambda a: a.view(2, 3, 4).permute(1, 2, 0).diagonal(0, 0, 1),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_write_through_view(dev, name):
    vf = VIEWS[name]

    def fn(a):
        other = a.view(-1)  # another view of the same base
        b = vf(a)
        b.mul_(2)
        b.add_(1)
        return a, b, other, vf(a)
    _run_both(fn, dev)


# the integer scatter path (positions pushed through the view), one view per op kind
INT_VIEWS = ["view", "t", "permute", "select_neg", "slice_step", "narrow", "diagonal_off", "unsqueeze",
             "unfold_gap", "as_strided_of_slice", "split_sizes", "unbind", "chain_view_slice_select",
             "chain_diag_of_permute"]


@pytest.mark.parametrize("name", INT_VIEWS)
def test_write_through_view_int(dev, name):
    vf = VIEWS[name]

    def fn(a):
        b = vf(a)
        b.mul_(3)
        b.sub_(1)
        other = a[2]
        return a, b, other
    _run_both(fn, dev, dtype=torch.int64, read_view=False)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_write_base_then_read_view(dev, name):
    vf = VIEWS[name]

    def fn(a):
        b = vf(a)
        a.mul_(3)
        a[1, 1] = -7
        return a, b
    _run_both(fn, dev, read_view=False)


def test_bool_and_small_int_views(dev):
    for dt in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32):
        def fn(a):
            b = a.t()[1:4]
            b.fill_(1)
            a[0].zero_()
            return a, b
        _run_both(fn, dev, dtype=dt)


def test_expand_read_sees_base(dev):
    def fn(a):
        e = a[:1].expand(3, 6)
        e2 = a[:, :1].expand(4, 5)
        a.add_(10)
        return e, e2, a
    _run_both(fn, dev)


def test_expand_write_rejected_like_cpu(dev):
    for t in (_base(), _base().to(dev)):
        e = t[:1].expand(3, 6)
        with pytest.raises(RuntimeError):
            e.add_(1)


def test_overlapping_unfold_read(dev):
    def fn(a):
        u = a.unfold(1, 3, 1)
        a[:, 2] = 100.0
        return u, a
    _run_both(fn, dev)


def test_complex_real_imag(dev):
    def fn(a):
        z = torch.complex(a, a + 1)
        r, i = z.real, z.imag
        r.mul_(2)
        i[1:].add_(5)
        z[0].mul_(1j)
        return z, r, i, torch.view_as_real(z)
    _run_both(fn, dev)


def test_view_as_real_and_complex(dev):
    def fn(a):
        z = torch.complex(a, -a)
        v = torch.view_as_real(z)
        v[..., 1].mul_(3)
        c = torch.view_as_complex(v[1:3])
        c.add_(2 + 1j)
        return z, v, c
    _run_both(fn, dev)


def test_view_dtype(dev):
    def fn(a):
        b = a.view(torch.int32)
        b.add_(1)
        return a, b
    _run_both(fn, dev)


def test_two_views_see_each_other(dev):
    def fn(a):
        row, col, diag = a[1], a[:, 2], a.diagonal()
        row.fill_(7)
        col.mul_(-1)
        diag.add_(100)
        return a, row, col, diag
    _run_both(fn, dev)


def test_many_mutations_interleaved(dev):
    def fn(a):
        v1 = a.view(2, 12)
        v2 = v1[:, ::3]
        v3 = a.t()
        for i in range(3):
            v2.add_(i)
            v3[i].mul_(2)
            a[i % 4].sub_(1)
        return a, v1, v2, v3
    _run_both(fn, dev)


def test_views_survive_barriers(dev):
    cpu = _base()
    xla = cpu.clone().to(dev)
    outs = []
    for a in (cpu, xla):
        b = a.t()
        c = b[2]
        if a.device.type == "xla":
            xm.mark_step()
        c.add_(5)
        if a.device.type == "xla":
            xm.mark_step()
        a.mul_(2)
        if a.device.type == "xla":
            xm.mark_step()
        b[0, 1] = -1
        outs.append([t.cpu() for t in (a, b, c)])
    for c, x in zip(*outs):
        assert torch.equal(c, x)


def test_view_of_pending_base_and_base_of_pending_view(dev):
    def fn(a):
        s = a * 2            # pending base
        v = s[1:3].t()
        v.add_(1)
        w = s.view(24)[5:10]
        s.div_(2)
        return s, v, w
    _run_both(fn, dev)


def test_setitem_forms(dev):
    def fn(a):
        a[1:3, ::2] = 5.0
        a[:, 1] += 1
        a[0] = torch.arange(6.).to(a.device)
        a[[0, 2], 3] = -1.0
        a[..., -1] *= 2
        return (a,)
    _run_both(fn, dev)


def test_inplace_on_views_with_autograd(dev):
    outs = []
    for d in ("cpu", dev):
        w = torch.arange(6.).to(d).requires_grad_()
        x = w * 1.0
        x[1:4].mul_(3)
        x.view(2, 3).t()[0].add_(1)
        x.sum().backward()
        outs.append((x.detach().cpu(), w.grad.cpu()))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1], outs[1][1])


# -- out=, copy_, detach, .data, set_, resize_ --------------------------------

def test_out_into_view(dev):
    def fn(a):
        b = a[1]
        torch.add(a[2], 1, out=b)
        torch.mul(a[0, :4], a[3, 2:], out=a[:, 5])
        torch.sum(a[:, :2], dim=1, out=a[:, 4])
        return a, b
    _run_both(fn, dev)


def test_out_resized_like_cpu(dev):
    res = []
    for d in ("cpu", dev):
        x = torch.arange(6.).to(d)
        out = torch.empty(0, device=d)
        torch.mul(x, 2, out=out)
        out2 = torch.zeros(2, device=d)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.add(x, 1, out=out2)
        res.append((out.cpu(), out2.cpu(), any("resized" in str(m.message) for m in w)))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    assert res[0][2] and res[1][2]


def test_copy_across_devices_and_dtypes(dev):
    def fn(a):
        a[1].copy_(torch.ones(6, dtype=torch.float64))                       # CPU f64 -> XLA f32 view
        a[2].copy_(torch.full((6,), 3, dtype=torch.int32).to(a.device))      # XLA i32 -> XLA f32 view
        a[:, 0].copy_(torch.tensor(9))                                        # broadcast a 0-dim
        a.t()[5].copy_(a[0, :4].to(torch.bfloat16))                          # bf16 through a transpose
        return (a,)
    _run_both(fn, dev)
    x = _base().to(dev)
    cpu_dst = torch.zeros(4, 6, dtype=torch.float64)
    cpu_dst.copy_(x.t().t())                                                 # XLA -> CPU, with cast
    assert torch.equal(cpu_dst, _base().double())
    ints = torch.zeros(4, 6, dtype=torch.int64, device=dev)
    ints.copy_(x * 1.7)                                                      # float -> int truncates
    assert torch.equal(ints.cpu(), (_base() * 1.7).long())
    b = torch.zeros(3, dtype=torch.bool, device=dev)
    b.copy_(torch.tensor([0.0, 2.0, -1.0]))
    assert b.cpu().tolist() == [False, True, True]


def test_detach_and_data_alias(dev):
    def fn(a):
        d = a.detach()
        d.add_(1)
        e = a.data
        e[0].mul_(2)
        f = a[1:].detach()
        f.sub_(3)
        return a, d, e, f
    _run_both(fn, dev)


def test_data_setter(dev):
    res = []
    for d in ("cpu", dev):
        p = torch.nn.Parameter(torch.ones(3, 2, device=d))
        p.data = torch.arange(4.).to(d)
        p.data.mul_(2)
        q = torch.ones(2, 2, device=d)
        q.data = q.data.to(torch.int64) + 1
        res.append((p.detach().cpu(), p.shape, q.cpu(), q.dtype, isinstance(p, torch.nn.Parameter)))
    c, x = res
    assert torch.equal(c[0], x[0]) and c[1] == x[1] and torch.equal(c[2], x[2]) and c[3] == x[3] and x[4]


def test_set_source_tensor(dev):
    def fn(a):
        b = torch.empty(0, device=a.device)
        b.set_(a)
        b.add_(1)
        c = torch.empty(0, device=a.device)
        c.set_(a[1])
        c.mul_(2)
        return a, b, c
    _run_both(fn, dev)


def test_set_strided_is_a_clear_error(dev):
    # PyTorch routes set_(tensor, offset, size, stride) through the tensor's Storage,
    # which XLA tensors do not have
    a = torch.zeros(4, 6, device=dev)
    b = torch.empty(0, device=dev)
    with pytest.raises(RuntimeError, match="Storage"):
        b.set_(a, 2, (2, 3), (6, 1))


def test_set_storage_is_a_clear_error(dev):
    x = torch.zeros(3, device=dev)
    with pytest.raises(Exception, match="Storage|storage"):
        x.set_(torch.zeros(3).untyped_storage())


def test_resize(dev):
    def fn(a):
        b = a.clone()
        b.resize_(24)
        c = a.clone()
        c.resize_(2, 3)
        d = a.clone()
        d.resize_as_(torch.empty(6, 4))
        return b, c, d
    _run_both(fn, dev)


def test_resize_of_a_view_beyond_its_storage_is_a_clear_error(dev):
    x = torch.zeros(4, 6, device=dev)
    with pytest.raises(RuntimeError, match="resize_ of a view .* beyond its storage"):
        x[3].resize_(7)


def test_resize_requires_grad_rejected(dev):
    x = torch.zeros(3, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError):
        x.resize_(4)


def test_copied_buffers_are_not_donated(dev):
    a = torch.ones(3, device=dev)
    b = torch.zeros(3, device=dev)
    xm.mark_step()
    b.copy_(a)
    xm.mark_step()
    b.add_(1)          # b's previous buffer is a's: it must not be donated
    xm.mark_step()
    assert b.cpu().tolist() == [2.0, 2.0, 2.0]
    assert a.cpu().tolist() == [1.0, 1.0, 1.0]


def test_data_assignment_shares_storage_as_in_eager(dev):
    def run(d):
        a = torch.ones(3, device=d)
        c = torch.zeros(3, device=d)
        c.data = a          # c reads a's storage from now on
        c.mul_(5)
        a.add_(1)
        v = c[1:]           # a view of the shared storage
        v.sub_(2)
        return [t.cpu().tolist() for t in (a, c, v)]
    got = run(dev)
    xm.mark_step()
    assert got == run("cpu") == [[6.0, 4.0, 4.0], [6.0, 4.0, 4.0], [4.0, 4.0]]


def test_views_report_eager_layout(dev):
    a = _base()
    x = a.to(dev)
    for name, vf in VIEWS.items():
        c, v = vf(a), vf(x)
        assert v.stride() == c.stride(), name
        assert v.storage_offset() == c.storage_offset(), name
        assert v.is_contiguous() == c.is_contiguous(), name
        d = v.detach()
        assert d.stride() == c.stride() and d.storage_offset() == c.storage_offset(), name


def test_copy_or_alias_exactly_as_eager(dev):
    # contiguous()/reshape/flatten copy a non-contiguous view and alias a contiguous one
    def fn(a):
        a.t().contiguous().add_(1)      # copy: a unchanged
        a.t().reshape(-1).add_(2)       # copy
        a[:, 1:].flatten().add_(4)      # copy
        a.view(-1)[2:].reshape(2, 11).add_(8)   # alias
        a[1:].contiguous().mul_(3)      # alias (already contiguous)
        a.t().t().reshape(24)[0] = -1   # alias
        return (a,)
    _run_both(fn, dev)


def test_backward_through_cpu_of_an_xla_tensor(dev):
    w = torch.randn(3, device=dev, requires_grad=True)
    (w * 3).cpu().sum().backward()
    assert w.grad.cpu().tolist() == [3.0, 3.0, 3.0]
    x = torch.randn(3, requires_grad=True)
    (x.to(dev) * 2).cpu().sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_reading_views_of_synced_data_compiles_nothing(dev):
    # a view of device data is read by fetching its base once and taking the
    # view on the host: no small graph per new view (x[i].item() in a loop,
    # a transposed gradient's .cpu())
    import torch_xla
    import torch_xla.debug.metrics as met
    cpu = _base(shape=(5, 6))
    x = cpu.to(dev)
    torch_xla.sync()
    met.clear_all()
    assert [x[i, 2].item() for i in range(5)] == [cpu[i, 2].item() for i in range(5)]
    assert torch.equal(x.t().cpu(), cpu.t())
    assert torch.equal(x[1:4, ::2].cpu(), cpu[1:4, ::2])
    assert torch.equal(x.unbind(1)[3].cpu(), cpu.unbind(1)[3])
    assert torch.equal(x.view(-1)[7:20].view(13, 1).expand(13, 2).cpu(), cpu.view(-1)[7:20].view(13, 1).expand(13, 2))
    assert met.counter_value("UncachedCompile") is None
