"""torch.nn.GRU after `import torch_xla`: one scan loop per layer on the device,
torch's own GRU everywhere else, and nothing of ours in a saved model."""
import copy
import io
import pickle
import re

import torch
import torch.nn as nn

import torch_xla
from torch_xla.experimental.gru import GRU


def _grads(module, *tensors):
    return [t.grad for t in tensors] + [p.grad for p in module.parameters()]


def _close(a, b, tol=1e-4):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=tol, atol=tol)


def test_import_makes_nn_gru_ours():
    assert nn.GRU is GRU and nn.GRU._orig is not GRU
    assert type(nn.GRU(2, 3)) is GRU
    assert type(nn.GRU(2, 3, bidirectional=True)) is nn.GRU._orig


def test_values_and_gradients_match_torch_cpu(dev, bias=False, batch_first=True):
    torch.manual_seed(0)
    ref = nn.GRU._orig(3, 5, num_layers=2, bias=bias, batch_first=batch_first)
    ours = nn.GRU(3, 5, num_layers=2, bias=bias, batch_first=batch_first)
    ours.load_state_dict(ref.state_dict())
    ours.to(dev)
    x = torch.randn(4, 7, 3) if batch_first else torch.randn(7, 4, 3)
    h0 = torch.randn(2, 4, 5)
    x.requires_grad_(True)
    h0.requires_grad_(True)
    xd = x.detach().to(dev).requires_grad_(True)
    hd = h0.detach().to(dev).requires_grad_(True)

    out, hn = ref(x, h0)
    (out.square().sum() + hn.sum()).backward()
    out_d, hn_d = ours(xd, hd)
    (out_d.square().sum() + hn_d.sum()).backward()

    _close(out_d, out)
    _close(hn_d, hn)
    for g_d, g in zip(_grads(ours, xd, hd), _grads(ref, x, h0)):
        _close(g_d, g)


def test_unbatched_input_and_default_hidden_state(dev):
    torch.manual_seed(1)
    ref = nn.GRU._orig(3, 4)
    ours = nn.GRU(3, 4)
    ours.load_state_dict(ref.state_dict())
    ours.to(dev)
    x = torch.randn(6, 3)
    out, hn = ref(x)
    out_d, hn_d = ours(x.to(dev))
    assert out_d.shape == out.shape and hn_d.shape == hn.shape
    _close(out_d, out)
    _close(hn_d, hn)


def test_one_loop_per_layer_whatever_the_length(dev):
    gru = nn.GRU(3, 4, num_layers=3).to(dev)
    out, hn = gru(torch.randn(500, 2, 3, device=dev))
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out, hn])
    assert len(re.findall(r"\swhile\(", hlo)) == 3


def test_cpu_gru_is_torchs_and_saves_as_torchs():
    torch.manual_seed(2)
    g = nn.GRU(3, 4)
    x = torch.randn(5, 2, 3)
    want = nn.GRU._orig.forward(g, x)[0]
    for twin in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert type(twin) is nn.GRU._orig
        torch.testing.assert_close(twin(x)[0], want)
    buf = io.BytesIO()
    torch.save(g, buf)
    assert b"torch_xla" not in buf.getvalue()


def test_clip_grad_norm_with_no_gradients_stays_on_the_device(dev):
    assert nn.utils.clip_grad_norm_._orig is not None
    norm = nn.utils.clip_grad_norm_(torch.zeros(3, device=dev), 1.0)
    assert norm.device.type == "xla" and norm.item() == 0.0
    assert nn.utils.clip_grad_norm_(torch.zeros(3), 1.0).device.type == "cpu"
    p = torch.zeros(3, requires_grad=True)
    p.grad = torch.full((3,), 4.0)
    pd = torch.zeros(3, device=dev, requires_grad=True)
    pd.grad = torch.full((3,), 4.0, device=dev)
    norm_d = nn.utils.clip_grad_norm_(iter([pd]), 1.0)  # a generator is read once
    norm = nn.utils.clip_grad_norm_(iter([p]), 1.0)
    _close(norm_d, norm)
    _close(pd.grad, p.grad)
