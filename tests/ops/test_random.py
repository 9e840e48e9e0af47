"""The device generator: reseeding reproduces random tensors and dropout
masks exactly; successive draws differ; torch.Generator is refused."""
import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def _draw(dev):
    """One of every random op, read back (one barrier)."""
    ones = torch.ones(64, device=dev)
    outs = [
        torch.randn(4, 5, device=dev),
        torch.rand(7, device=dev),
        F.dropout(ones, 0.5),
        torch.randint(0, 100, (9,), device=dev),
        torch.randperm(10, device=dev),
        torch.empty(6, device=dev).normal_(2, 3),
        torch.empty(6, device=dev).uniform_(-1, 1),
        torch.bernoulli(torch.full((16,), 0.5, device=dev)),
        torch.randn_like(ones[:5]),
        torch.rand_like(ones[:5]),
        torch.empty(5, device=dev).exponential_(),
        torch.multinomial(torch.ones(8, device=dev), 4),
        torch.randn(3, dtype=torch.float64, device=dev),
        torch.randn(3, dtype=torch.bfloat16, device=dev),
        torch.native_dropout(ones, 0.3, True)[1],
    ]
    snap = [o.clone() for o in outs]
    xm.mark_step()
    return [s.cpu() for s in snap]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def _all_differ(a, b):
    return all(not torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("seed_fn", ["torch.manual_seed", "torch_xla.manual_seed", "xm.set_rng_state"])
def test_reseed_reproduces_exactly(dev, seed_fn):
    seed = {"torch.manual_seed": torch.manual_seed, "torch_xla.manual_seed": torch_xla.manual_seed,
            "xm.set_rng_state": xm.set_rng_state}[seed_fn]
    seed(1234)
    first = _draw(dev)
    second = _draw(dev)
    seed(1234)
    assert _same(first, _draw(dev))
    assert _same(second, _draw(dev))
    assert _all_differ(first, second)   # successive steps differ
    if seed_fn == "torch.manual_seed":
        seed(1235)
        assert _all_differ(first, _draw(dev))


def test_same_seed_same_values_in_a_fresh_process(dev):
    import subprocess
    import sys
    script = ("import torch, torch_xla, torch.nn.functional as F\n"
              "torch.manual_seed(7)\n"
              "d = torch_xla.device()\n"
              "print(torch.randn(3, device=d).cpu().tolist(), F.dropout(torch.ones(8, device=d), 0.5).cpu().tolist())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    torch.manual_seed(7)
    here = f"{torch.randn(3, device=dev).cpu().tolist()} {F.dropout(torch.ones(8, device=dev), 0.5).cpu().tolist()}"
    assert out.stdout.strip() == here


def test_get_set_rng_state_round_trip(dev):
    torch.manual_seed(3)
    _draw(dev)
    state = xm.get_rng_state()
    a = _draw(dev)
    b = _draw(dev)
    xm.set_rng_state(state)
    assert _same(a, _draw(dev))
    assert _same(b, _draw(dev))
    # the device module's state (what fork_rng / checkpoint use) round-trips too
    st = torch.xla.get_rng_state()
    c = _draw(dev)
    torch.xla.set_rng_state(st)
    assert _same(c, _draw(dev))
    with torch.random.fork_rng(device_type="xla"):
        inside = _draw(dev)
    assert _same(inside, _draw(dev))


def test_dropout_masks_reproduce_and_are_consistent(dev):
    x = torch.arange(1, 201, dtype=torch.float32, device=dev)
    torch_xla.manual_seed(99)
    y1 = F.dropout(x, 0.4)
    m1 = (y1 != 0)
    xm.mark_step()
    torch_xla.manual_seed(99)
    y2 = F.dropout(x, 0.4)
    xm.mark_step()
    assert torch.equal(y1.cpu(), y2.cpu())
    # kept entries are scaled by 1/(1-p); about p of them are dropped
    kept = m1.cpu()
    assert torch.allclose(y1.cpu()[kept], x.cpu()[kept] / 0.6)
    assert 40 < int((~kept).sum()) < 120
    # dropout inside a training step: backward uses the same mask
    torch_xla.manual_seed(5)
    w = torch.ones(200, device=dev, requires_grad=True)
    out = F.dropout(w * 2, 0.5)
    out.sum().backward()
    xm.mark_step()
    assert torch.equal((out.detach().cpu() != 0), (w.grad.cpu() != 0))


def test_reseeding_every_step_does_not_recompile(dev):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(dev)
    x = torch.randn(4, 8, device=dev)
    xm.mark_step()
    met.clear_all()
    outs = []
    for step in range(4):
        torch.manual_seed(step % 2)
        outs.append(model(x).detach())
        xm.mark_step()
    assert met.counter_value("UncachedCompile") == 1
    got = [o.cpu() for o in outs]
    assert torch.equal(got[0], got[2]) and torch.equal(got[1], got[3])
    assert not torch.equal(got[0], got[1])


def test_distributions_are_sane(dev):
    torch.manual_seed(0)
    n = 20000
    r = torch.randn(n, device=dev)
    u = torch.rand(n, device=dev)
    ri = torch.randint(3, 9, (n,), device=dev)
    perm = torch.randperm(50, device=dev)
    bern = torch.bernoulli(torch.full((n,), 0.3, device=dev))
    mn = torch.multinomial(torch.tensor([0.0, 1.0, 3.0, 0.0, 1.0], device=dev), 3)
    mnr = torch.multinomial(torch.tensor([0.0, 1.0, 3.0], device=dev), 1000, replacement=True)
    r, u, ri, perm, bern, mn, mnr = (t.cpu() for t in (r, u, ri, perm, bern, mn, mnr))
    assert abs(r.mean()) < 0.05 and abs(r.std() - 1) < 0.05
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert ri.min() == 3 and ri.max() == 8 and ri.dtype == torch.int64
    assert sorted(perm.tolist()) == list(range(50))
    assert abs(bern.mean() - 0.3) < 0.02
    assert sorted(mn.tolist()) == [1, 2, 4]
    assert set(mnr.tolist()) <= {1, 2} and 0.65 < (mnr == 2).float().mean() < 0.85


def test_randperm_is_a_uniform_shuffle_at_every_size(dev):
    # small sizes sort by one round of random keys; large ones take JAX's rounds
    for n in (1, 3, 1625, 1626, 4000):
        p = torch.randperm(n, device=dev).cpu()
        assert p.dtype == torch.int64 and sorted(p.tolist()) == list(range(n))
    assert torch.randperm(6, device=dev, dtype=torch.int32).dtype == torch.int32
    firsts = []
    for _ in range(400):              # one graph, run 400 times with a new seed each
        firsts.append(torch.randperm(4, device=dev)[0])
        xm.mark_step()
    firsts = torch.stack([f.cpu() for f in firsts])
    counts = torch.bincount(firsts, minlength=4).float()
    assert counts.min() > 70 and counts.max() < 130, counts    # 100 each expected


@pytest.mark.parametrize("call", [
    lambda d, g: torch.randn(3, device=d, generator=g),
    lambda d, g: torch.rand(3, device=d, generator=g),
    lambda d, g: torch.randint(0, 5, (3,), device=d, generator=g),
    lambda d, g: torch.randperm(5, device=d, generator=g),
    lambda d, g: torch.empty(3, device=d).normal_(generator=g),
    lambda d, g: torch.empty(3, device=d).uniform_(generator=g),
    lambda d, g: torch.empty(3, device=d).exponential_(generator=g),
    lambda d, g: torch.empty(3, device=d).cauchy_(generator=g),
    lambda d, g: torch.empty(3, device=d).log_normal_(generator=g),
    lambda d, g: torch.empty(3, device=d).geometric_(0.5, generator=g),
    lambda d, g: torch.bernoulli(torch.full((3,), 0.5, device=d), generator=g),
    lambda d, g: torch.multinomial(torch.ones(3, device=d), 2, generator=g),
    lambda d, g: torch.poisson(torch.ones(3, device=d), generator=g),
    lambda d, g: torch.normal(torch.zeros(3, device=d), 1.0, generator=g),
])
def test_generator_argument_is_rejected(dev, call):
    g = torch.Generator().manual_seed(0)
    with pytest.raises(RuntimeError, match="torch.Generator"):
        call(dev, g)
