"""ZeRO-1 against data-parallel training, on every rank of a torch_xla.launch job.

python zero1_worker.py OUT_DIR CASE...: each CASE is MODEL/OPTIMIZER-clipCLIP
(`mlp/sgd-clipNone`, `gpt/adamw-clip0.5`, ...; MODEL `mlp` or `gpt`, OPTIMIZER `sgd` or
`adamw`); the model trains 5 steps with ZeroRedundancyOptimizer and with xm.optimizer_step
(the reference, clipping by torch.nn.utils.clip_grad_norm_ after the all-reduce). A run
interrupted after 3 steps, saved and reloaded into fresh objects must continue
identically (a case ending in `+noresume` skips that part). Rank 0 writes
OUT_DIR/result.json."""
import json
import os
import sys

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

STEPS = 5


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from nets import GPT  # noqa: E402

MODEL = "mlp"


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 30), nn.Tanh(), nn.Linear(30, 30), nn.Tanh(), nn.Linear(30, 3))

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.net(x), y)


def model_on(dev):
    torch.manual_seed(0)
    return (_MLP() if MODEL == "mlp" else GPT(vocab=64, d=32, heads=4, layers=2, ctx=16)).to(dev)


def batches(rank):
    g = torch.Generator().manual_seed(500 + rank)
    if MODEL == "mlp":
        return [(torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(STEPS)]
    out = []
    for _ in range(STEPS):
        idx = torch.randint(0, 64, (4, 16), generator=g)
        out.append((idx, torch.roll(idx, -1, 1)))
    return out


OPTS = {"sgd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), "adamw": (torch.optim.AdamW, {"lr": 1e-2})}


def loss_of(model, x, y, dev):
    return model(x.to(dev), y.to(dev))


def run_reference(dev, data, opt_name, clip):
    cls, kw = OPTS[opt_name]
    model = model_on(dev)
    opt = cls(model.parameters(), **kw)
    losses, norms = [], []
    for x, y in data:
        opt.zero_grad()
        loss = loss_of(model, x, y, dev)
        loss.backward()
        xm.reduce_gradients(opt)
        if clip:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        opt.step()
        xm.mark_step()
        losses.append(loss.item())
    return losses, [float(n) for n in norms], model


def run_zero1(dev, data, opt_name, clip, stop_at=None, resume=None):
    cls, kw = OPTS[opt_name]
    model = model_on(dev)
    opt = ZeroRedundancyOptimizer(model.parameters(), cls, grad_clipping=bool(clip), max_norm=clip, **kw)
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["opt"])
    losses, norms = [], []
    start = 0 if resume is None else resume["step"]
    for i, (x, y) in enumerate(data[start:stop_at], start):
        opt.zero_grad()
        loss = loss_of(model, x, y, dev)
        loss.backward()
        opt.step()
        xm.mark_step()
        losses.append(loss.item())
        if clip:
            norms.append(float(opt.grad_norm))
    return losses, norms, model, opt


def main(index, out_dir, cases):
    global MODEL
    dev = torch_xla.device()
    rank, world = xr.global_ordinal(), xr.world_size()
    res = {"world": world, "cases": {}}
    for case in cases:
        case, _, flag = case.partition("+")
        MODEL, _, case = case.rpartition("/")
        MODEL = MODEL or "mlp"
        data = batches(rank)
        opt_name, clip = case.split("-clip")
        clip = None if clip == "None" else float(clip)
        ref_losses, ref_norms, ref_model = run_reference(dev, data, opt_name, clip)
        losses, norms, model, opt = run_zero1(dev, data, opt_name, clip)
        pdiff = max((a - b).abs().max().item() for a, b in zip(model.state_dict().values(),
                                                               ref_model.state_dict().values()))
        state_numel = sum(t.numel() for s in opt.base_optimizer.state.values() for t in s.values()
                          if torch.is_tensor(t) and t.dim() > 0)
        full_numel = sum(p.numel() for p in model.parameters())
        resume_diff = None
        if flag != "noresume":
            # interrupted after 3 steps, saved to disk, resumed in fresh objects
            first, _, m3, o3 = run_zero1(dev, data, opt_name, clip, stop_at=3)
            path = os.path.join(out_dir, f"{MODEL}-{opt_name}-{clip}-{rank}.pt")
            xm.save({"model": m3.state_dict(), "opt": o3.state_dict(), "step": 3}, path, master_only=False)
            rest, _, _, _ = run_zero1(dev, data, opt_name, clip, resume=torch.load(path, weights_only=False))
            resume_diff = max(abs(a - b) for a, b in zip(first + rest, losses))
        res["cases"][f"{MODEL}/{opt_name}-clip{clip}"] = {
            "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses)),
            "norm_diff": max((abs(a - b) for a, b in zip(norms, ref_norms)), default=0.0),
            "param_diff": pdiff,
            "resume_diff": resume_diff,
            "state_fraction": state_numel / (full_numel * (2 if opt_name == "adamw" else 1)),
        }
    lines = xm.rendezvous("zero1_result", json.dumps(res).encode())
    if rank == 0:
        recs = [json.loads(line) for line in lines]
        merged = recs[0]
        for name in merged["cases"]:
            for key in ("loss_diff", "norm_diff", "param_diff", "resume_diff", "state_fraction"):
                vals = [r["cases"][name][key] for r in recs]
                merged["cases"][name][key] = None if None in vals else max(vals)
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump(merged, f)


if __name__ == "__main__":
    torch_xla.launch(main, args=(sys.argv[1], sys.argv[2:]))
