"""Data-dependent ops: right results against eager CPU, and each host read
counted as upstream counts it."""
import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

X = torch.tensor([[1., -2., 3., 0.], [0., 5., -6., 2.], [4., 0., 0., -1.]])


def _cmp(c, x):
    if isinstance(c, torch.Tensor):
        assert x.device.type == "xla"
        got = x.cpu()
        assert got.dtype == c.dtype and torch.equal(got, c), f"\nCPU {c}\nXLA {got}"
    elif isinstance(c, (tuple, list)):
        assert len(c) == len(x)
        for a, b in zip(c, x):
            _cmp(a, b)
    else:
        assert type(c) is type(x) and c == x


CASES = {
    "nonzero": (lambda t: t.nonzero(), "aten::nonzero"),
    "nonzero_as_tuple": (lambda t: torch.nonzero(t, as_tuple=True), "aten::nonzero"),
    "argwhere": (lambda t: torch.argwhere(t > 0), "aten::nonzero"),
    "where_cond": (lambda t: torch.where(t < 0), "aten::nonzero"),
    "masked_select": (lambda t: t.masked_select(t > 0), "aten::masked_select"),
    "masked_select_bcast": (lambda t: t.masked_select(torch.tensor([True, False, True, True], device=t.device)),
                            "aten::masked_select"),
    "mask_index": (lambda t: t[t > 0], "aten::nonzero"),
    "mask_index_rows": (lambda t: t[t[:, 0] > 0], "aten::nonzero"),
    "mask_index_cols": (lambda t: t[:, t[0] != 0], "aten::nonzero"),
    "mask_index_mixed": (lambda t: t[t[:, 1] >= 0, 1:3], "aten::nonzero"),
    "mask_index_cpu_mask": (lambda t: t[torch.tensor([True, False, True])], "aten::nonzero"),
    "mask_index_uint8": (lambda t: t[(t > 0).to(torch.uint8)], "aten::nonzero"),
    "mask_index_empty": (lambda t: t[t > 100], "aten::nonzero"),
    "unique": (lambda t: torch.unique(t), "aten::_unique2"),
    "unique_all": (lambda t: torch.unique(t.abs(), sorted=True, return_inverse=True, return_counts=True),
                   "aten::_unique2"),
    "unique_dim": (lambda t: torch.unique(torch.cat([t, t[:1]]), dim=0), "aten::unique_dim"),
    "unique_consecutive": (lambda t: torch.unique_consecutive(t.abs().flatten(), return_counts=True),
                           "aten::unique_consecutive"),
    "item": (lambda t: t.sum().item(), "aten::_local_scalar_dense"),
    "int": (lambda t: int(t[1, 1]), "aten::_local_scalar_dense"),
    "float": (lambda t: float(t.max()), "aten::_local_scalar_dense"),
    "bool": (lambda t: bool(t.sum() > 0), "aten::_local_scalar_dense"),
    "if": (lambda t: "yes" if (t < -5).any() else "no", "aten::_local_scalar_dense"),
    "tolist": (lambda t: t.tolist(), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_cpu_and_is_counted(dev, name):
    fn, counter = CASES[name]
    expect = fn(X.clone())
    xm.mark_step()
    met.clear_all()
    got = fn(X.clone().to(dev))
    _cmp(expect, got)
    if counter is not None:
        assert met.counter_value(counter) == 1, met.counter_names()


def test_result_feeds_lazy_graph(dev):
    t = X.to(dev)
    sel = t[t > 0]
    out = (sel * 2).sum() + t.nonzero().shape[0]
    assert out.item() == float((X[X > 0] * 2).sum() + X.nonzero().shape[0])


def test_mask_assignment(dev):
    m_cols = torch.tensor([True, False, True, True])
    cases = [
        ("scalar", lambda t: t.__setitem__(t > 0, 7.0)),
        ("tensor_values", lambda t: t.__setitem__(t > 0, torch.arange(5.).to(t.device))),
        ("row_mask", lambda t: t.__setitem__(t[:, 0] > 0, torch.tensor([9., 8., 7., 6.]).to(t.device))),
        ("col_mask_scalar", lambda t: t.__setitem__((slice(None), m_cols.to(t.device)), -1.0)),
        ("col_mask_values", lambda t: t.__setitem__((slice(None), m_cols.to(t.device)),
                                                    torch.arange(9.).reshape(3, 3).to(t.device))),
        ("accumulate", lambda t: t.index_put_((t < 0,), torch.tensor(10.).to(t.device), accumulate=True)),
        ("masked_fill", lambda t: t.masked_fill_(t == 0, 3.5)),
        ("int_tensor", lambda t: t.__setitem__(t > 1, 0)),
    ]
    for name, f in cases:
        c = X.clone()
        f(c)
        x = X.clone().to(dev)
        met.clear_all()
        f(x)
        assert torch.equal(x.cpu(), c), name
    # a leading mask or a single value needs no host read
    x = X.clone().to(dev)
    xm.mark_step()
    met.clear_all()
    x[x > 0] = 1.0
    x[x < 0] = torch.arange(3.).to(dev)
    x[:, m_cols.to(dev)] = 5.0
    xm.mark_step()
    assert met.counter_value("aten::nonzero") is None
    assert met.counter_value("TransferFromDeviceTime") is None and met.metric_data("TransferFromDeviceTime") is None


def test_nonzero_static_stays_on_device(dev):
    t = X.to(dev)
    xm.mark_step()
    met.clear_all()
    out = torch.nonzero_static(t, size=8, fill_value=-1)
    assert out.shape == (8, 2)
    expect = torch.nonzero_static(X, size=8, fill_value=-1)
    xm.mark_step()
    assert met.counter_value("aten::nonzero") is None
    assert torch.equal(out.cpu(), expect)


def test_data_dependent_on_views_and_pending(dev):
    t = X.clone().to(dev)
    v = t.t()[1:]
    v.mul_(2)
    c = X.clone()
    c.t()[1:].mul_(2)
    _cmp(c.t()[1:][c.t()[1:] > 0], v[v > 0])
    _cmp(c.t()[1:].nonzero(), v.nonzero())
    assert v.sum().item() == c.t()[1:].sum().item()


def test_cpu_index_tensors(dev):
    t = X.clone().to(dev)
    _cmp(X[torch.tensor([0, 2])], t[torch.tensor([0, 2])])
    c = X.clone()
    c[torch.tensor([1]), 2] = 5.0
    t[torch.tensor([1]), 2] = 5.0
    _cmp(c, t)


def test_ambiguous_reads_fail_like_cpu_without_reading(dev):
    t = X.to(dev)
    xm.mark_step()
    met.clear_all()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t)
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        t.item()
    assert met.counter_value("aten::_local_scalar_dense") is None
