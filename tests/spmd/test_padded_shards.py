"""Uneven layouts held padded at rest: a weight whose dim 0 (a vocabulary of
50,257 rows) does not divide over 4 devices keeps only its padded shard on each
device (ceil(n/4) rows, zeros at the end of the last), reads back its logical
value everywhere, and trains exactly like eager PyTorch on the CPU."""
import pytest

COMMON = """
import numpy as np, torch
import torch_xla, torch_xla.runtime as xr
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
from torch_xla.engine import api
xr.use_spmd()
dev = torch_xla.device()
mesh = xs.Mesh(np.arange(4), (4,), ("fsdp",))
V, D = 50257, 64

def per_device_bytes(t):
    arr = api.value_node(t).data          # the device buffers behind t
    return [s.data.nbytes for s in arr.addressable_shards]

def check_quarter(t):
    full = t.numel() * t.element_size()
    got = per_device_bytes(t)
    assert len(got) == 4 and max(got) <= 0.26 * full, (got, full)
"""


def test_padded_weight_holds_a_quarter_and_reads_logical(spmd_run):
    spmd_run(COMMON + """
torch.manual_seed(0)
w = torch.randn(V, D)
t = w.to(dev)
xs.mark_sharding(t, mesh, ("fsdp", None))
check_quarter(t)
assert torch_xla._XLAC._get_xla_sharding_spec(t) == "{devices=[4,1]0,1,2,3}"
assert tuple(t.shape) == (V, D) and torch.equal(t.cpu(), w)
assert torch.allclose((t * 2 + 1).cpu(), w * 2 + 1)
# local shards: upstream's zero-padded shards with the logical indices
st = xs.mark_sharding(t, mesh, ("fsdp", None))
shards = st.local_shards
rows = -(-V // 4)
assert [tuple(s.data.shape) for s in shards] == [(rows, D)] * 4
for k, s in enumerate(shards):
    lo, hi = k * rows, min((k + 1) * rows, V)
    assert s.indices[0] == slice(lo, hi, 1)
    assert torch.equal(s.data[:hi - lo], w[lo:hi])
    assert torch.count_nonzero(s.data[hi - lo:]) == 0
# an in-place write keeps it padded at rest
t.mul_(3.0)
xm.mark_step()
check_quarter(t)
assert torch.allclose(t.cpu(), w * 3)
# a host read of a pending value keeps it padded too
t.add_(1.0)
assert torch.allclose(t.cpu(), w * 3 + 1)
check_quarter(t)
# a 1-D vector and printing
b = torch.arange(V, dtype=torch.float32).to(dev)
xs.mark_sharding(b, mesh, ("fsdp",))
check_quarter(b)
assert str(b.cpu()) == str(torch.arange(V, dtype=torch.float32))
assert str(b).startswith("tensor([0.0000e+00") and "xla" in str(b), str(b)
# clear_sharding: whole again, on one device
xs.clear_sharding(t)
assert tuple(api.value_node(t).data.shape) == (V, D)
assert torch.allclose(t.cpu(), w * 3 + 1)
print("OK")
""")


@pytest.mark.parametrize("how", ["mark_sharding", "fsdpv2"])
def test_padded_vocabulary_trains_like_eager(spmd_run, how):
    spmd_run(COMMON + f"HOW = {how!r}" + """
class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.out = torch.nn.Linear(D, V)
    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))

torch.manual_seed(0)
ref = LM()
model = LM()
model.load_state_dict(ref.state_dict())
model = model.to(dev)
if HOW == "fsdpv2":     # every weight over 'fsdp' along its largest dim (dim 0 here)
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel
    model = SpmdFullyShardedDataParallel(model, mesh)
else:
    for name, p in model.named_parameters():     # every weight over its dim 0
        xs.mark_sharding(p, mesh, ("fsdp",) + (None,) * (p.dim() - 1))
for p in model.parameters():
    check_quarter(p)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
g = torch.Generator().manual_seed(1)
losses, ref_losses = [], []
for step in range(3):
    x = torch.randint(0, V, (8, 4), generator=g)
    y = torch.randint(0, V, (8, 4), generator=g)
    xx, yy = x.to(dev), y.to(dev)
    xs.mark_sharding(xx, mesh, ("fsdp", None))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xx).flatten(0, 1), yy.flatten())
    loss.backward()
    opt.step()
    xm.mark_step()
    losses.append(loss.item())
    ref_opt.zero_grad()
    rl = torch.nn.functional.cross_entropy(ref(x).flatten(0, 1), y.flatten())
    rl.backward()
    ref_opt.step()
    ref_losses.append(rl.item())
    for p in model.parameters():     # still padded at rest after each step, gradients too
        check_quarter(p)
        check_quarter(p.grad)
assert np.allclose(losses, ref_losses, rtol=1e-5, atol=1e-5), (losses, ref_losses)
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    assert torch.allclose(p.cpu(), q.detach(), rtol=1e-4, atol=1e-5), name
    assert torch.allclose(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6), name
    st = xs.mark_sharding(p, mesh, ("fsdp",) + (None,) * (p.dim() - 1))
    logical = torch.cat([s.data[:s.indices[0].stop - s.indices[0].start] for s in st.local_shards])
    assert torch.allclose(logical, q.detach(), rtol=1e-4, atol=1e-5), name
print("losses", losses)
print("OK")
""")
