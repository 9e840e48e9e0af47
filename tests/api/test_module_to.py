"""model.to(xla) and back, against eager PyTorch: it never fails where eager CUDA
succeeds, and it keeps what eager keeps (Parameter identity, tied weights, an
optimizer built before the move)."""
import copy
import weakref

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm

D = "xla"


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _tied():
    torch.manual_seed(0)
    m = nn.Module()
    m.emb = nn.Embedding(5, 3)
    m.head = nn.Linear(3, 5, bias=False)
    m.head.weight = m.emb.weight
    return m


def _tied_loss(m, ids):
    return m.head(m.emb(ids)).logsumexp(-1).sum()


def _train(model, opt, x, steps, device):
    for _ in range(steps):
        opt.zero_grad()
        model(x.to(device)).pow(2).sum().backward()
        opt.step()
        if device == D:
            xm.mark_step()


def _params(model):
    return [p.detach().cpu() for p in model.parameters()]


def test_to_after_a_cpu_forward_pass_keeps_identity_and_trains_like_eager():
    # the CPU graph of `ref` still holds the weights when the model moves
    model = _mlp()
    ref_model = copy.deepcopy(model)
    x = torch.randn(5, 3)
    ref = model[2](model[1](model[0](x)))
    weights = list(model.parameters())
    model.to(D)
    assert [p is w for p, w in zip(model.parameters(), weights)] == [True] * 4
    assert all(p.device.type == "xla" and isinstance(p, nn.Parameter) for p in model.parameters())
    ref.sum().backward()   # the old graph runs on the CPU values it was built from
    assert all(w.grad is None for w in weights)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref_model))
    _train(model, opt, x, 3, D)
    _train(ref_model, ref_opt, x, 3, "cpu")
    for got, want in zip(_params(model), _params(ref_model)):
        torch.testing.assert_close(got, want)


def test_to_keeps_tied_weights_tied():
    model, ref = _tied(), _tied()
    model.to(D)
    assert model.head.weight is model.emb.weight
    ids = torch.tensor([[0, 3, 4], [1, 1, 2]])
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref))
    for _ in range(3):
        for m, o, d in ((model, opt, D), (ref, ref_opt, "cpu")):
            o.zero_grad()
            _tied_loss(m, ids.to(d)).backward()
            o.step()
        xm.mark_step()
    torch.testing.assert_close(model.emb.weight.detach().cpu(), ref.emb.weight.detach())
    assert model.head.weight is model.emb.weight


def test_an_optimizer_built_before_the_move_trains_the_moved_parameters():
    model, ref = _mlp(), _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    x = torch.randn(5, 3)
    model(x).sum().backward()      # gradients exist on the CPU too, and move with the model
    ref(x).sum().backward()
    model.to(D)
    assert all(p.grad.device.type == "xla" for p in model.parameters())
    assert opt.param_groups[0]["params"][0] is model[0].weight
    _train(model, opt, x, 3, D)
    _train(ref, ref_opt, x, 3, "cpu")
    for got, want in zip(_params(model), _params(ref)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_parameters_held_by_weak_references_still_move():
    # swap_tensors refuses a tensor with weak references: such a Parameter is
    # replaced by a new one on the device (as upstream replaces every Parameter)
    model, ref = _mlp(), _mlp()
    refs = [weakref.ref(p) for p in model.parameters()]
    model.to(D)
    assert all(isinstance(p, nn.Parameter) and p.device.type == "xla" for p in model.parameters())
    x = torch.randn(5, 3)
    torch.testing.assert_close(model(x.to(D)).cpu(), ref(x).detach())
    del refs


def test_buffers_move_like_eager():
    bn, ref = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    bn.to(D)
    x = torch.randn(6, 3)
    bn(x.to(D))
    ref(x)
    xm.mark_step()
    torch.testing.assert_close(bn.running_mean.cpu(), ref.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), ref.running_var)
    assert int(bn.num_batches_tracked.cpu()) == int(ref.num_batches_tracked) == 1


def test_back_to_the_cpu_after_training_matches_eager():
    model, ref = _mlp(), _mlp()
    model.to(D)
    x = torch.randn(5, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    _train(model, opt, x, 2, D)
    _train(ref, ref_opt, x, 2, "cpu")
    model.to("cpu")
    assert all(p.device.type == "cpu" and isinstance(p, nn.Parameter) for p in model.parameters())
    torch.testing.assert_close(model(x), ref(x))
    # and it trains on the CPU from there
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, x, 1, "cpu")
    _train(ref, ref_opt, x, 1, "cpu")
    for got, want in zip(_params(model), _params(ref)):
        torch.testing.assert_close(got, want)


def test_tied_weights_back_to_the_cpu_keep_their_values():
    model = _tied()
    model.to(D)
    model.to("cpu")
    ref = _tied()
    ids = torch.tensor([[0, 3, 4]])
    torch.testing.assert_close(_tied_loss(model, ids), _tied_loss(ref, ids))
    torch.testing.assert_close(model.head.weight, model.emb.weight)


def test_scan_layers_on_a_model_checked_on_the_cpu_first():
    from torch_xla.experimental.scan_layers import scan_layers
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    x = torch.randn(2, 4)
    ref = x
    for layer in layers:
        ref = layer(ref)
    layers.to(D)
    out = scan_layers(layers, x.to(D))
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
