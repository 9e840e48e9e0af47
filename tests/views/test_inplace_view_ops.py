"""In-place view ops (t_, transpose_, squeeze_, unsqueeze_, as_strided_) on a
tensor that has views, and in-place ops whose operand overlaps their target:
every case against eager PyTorch."""
import warnings

import pytest
import torch

import torch_xla


def _both(fn):
    """fn(device) -> list of tensors; the XLA results equal eager's (shape, dtype, values)."""
    want = fn("cpu")
    got = fn("xla")
    torch_xla.sync()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)


def test_unsqueeze_of_a_base_keeps_its_views_layout():
    def fn(d):
        w0 = torch.arange(8.).reshape(4, 1, 2).to(d)
        w2 = w0.squeeze(1)
        w0.unsqueeze_(2)
        return [w0, w2]
    _both(fn)


def test_transpose_of_a_base_keeps_its_views_layout():
    def fn(d):
        v0 = torch.arange(12.).reshape(2, 6).to(d)
        v1 = v0.view((1, 6, 2))
        v0.t_()
        return [v0, v1, v0.contiguous()]
    _both(fn)


def test_a_view_taken_after_squeeze_of_its_base_reads_the_new_layout():
    def fn(d):
        v2 = torch.arange(6.).reshape(1, 6).to(d)
        v2.squeeze_()
        v3 = v2.unsqueeze(1)
        return [v2, v3]
    _both(fn)


def test_writes_through_views_after_an_inplace_view_op_reach_every_view():
    def fn(d):
        a = torch.arange(12.).reshape(3, 4).to(d)
        row = a[1]
        a.t_()
        a[0].mul_(10)       # column 0 of the original
        row.add_(1)         # row 1 of the original
        b = torch.arange(6.).reshape(2, 3).to(d)
        c = b.view(3, 2)
        b.transpose_(0, 1)
        c[1:].fill_(-1)
        return [a, row, b, c]
    _both(fn)


def test_inplace_view_ops_on_a_view_and_with_pending_values():
    def fn(d):
        x = (torch.arange(24.).reshape(2, 3, 4).to(d) * 2)
        y = x[1]
        y.t_()
        y.unsqueeze_(0)
        y.mul_(3)
        z = x.permute(2, 0, 1)
        x.squeeze_(0)
        s = torch.arange(10.).to(d)
        s.as_strided_((2, 3), (3, 1), 1)
        return [x, y, z, s]
    _both(fn)


def test_inplace_view_ops_across_a_barrier():
    def fn(d):
        a = torch.arange(6.).reshape(2, 3).to(d)
        v = a.view(3, 2)
        a.t_()
        if d == "xla":
            torch_xla.sync()
        a.add_(1)
        if d == "xla":
            torch_xla.sync()
        return [a, v]
    _both(fn)


def test_an_inplace_op_whose_operand_partly_overlaps_its_target_raises():
    for d in ("cpu", "xla"):
        v2 = torch.tensor(3., device=d)
        v3 = v2.view((1,))
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            v3.sub_(v2)
        a = torch.arange(6., device=d)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            a[1:].add_(a[:-1])
        t = torch.arange(4., device=d).reshape(2, 2)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            t.add_(t.t())   # the same memory, other strides


def test_inplace_ops_on_the_same_or_disjoint_memory_are_fine():
    def fn(d):
        b = torch.arange(6.).to(d)
        b.add_(b)                     # the same memory
        b[2:4].mul_(b[2:4])           # the same view
        b[:3].add_(b[3:])             # disjoint halves
        t = torch.arange(3.).to(d)
        t.add_(t[:1].expand(3))       # not dense: eager does not compare
        return [b, t]
    _both(fn)


def test_resize_of_a_view_within_its_storage():
    def fn(d):
        base = torch.arange(8.).reshape(4, 2).to(d)
        v = base[1:]
        v.resize_(2)
        v.add_(100)
        base2 = torch.arange(8.).reshape(4, 2).to(d)
        w = base2[1:]
        torch.neg(torch.ones(4).to(d), out=w)   # out= of another shape resizes the view
        return [v, base, w, base2]
    _both(fn)
    with pytest.raises(RuntimeError, match="beyond its storage"):
        torch.arange(4.).to("xla")[1:].resize_(5)


def test_resize_that_shrinks_a_tensor_others_read_keeps_its_storage():
    def fn(d):
        a = torch.arange(6.).to(d)
        v, w = a[2:], a.expand(6)
        a.resize_(2).fill_(7.)                 # v and w see the write, as in eager
        back = a.resize_(6).clone()            # within the storage again: the old elements
        o = torch.tensor([2, 1]).to(d)
        e = o.expand((-1,))
        torch.floor(torch.tensor(0).to(d), out=o)   # out= resized to 0-d, into the same storage
        alone = torch.arange(3.).to(d).resize_(5)[:3]   # nothing else reads it: may grow
        return [v, w, back, e, o, alone]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # out= resized: eager and we both warn
        _both(fn)


def test_writes_into_a_single_window_unfold():
    def fn(d):
        x = torch.arange(3.).to(d)
        x.unfold(0, 3, 1).masked_fill_(torch.tensor(True).to(d), 4.)
        return [x]
    _both(fn)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.arange(4.).to("xla").unfold(0, 3, 1).fill_(1.)   # two windows share elements
