"""FSDP against data-parallel training, on every rank of a torch_xla.launch job.

python fsdp_worker.py OUT_DIR MODEL CONFIG... : for each CONFIG (see CONFIGS) the
same model is trained 5 steps with XlaFullyShardedDataParallel and, as the
reference, data-parallel (xm.optimizer_step). Each rank feeds its own batches.
Rank 0 writes OUT_DIR/result.json: per config the largest loss difference over
the ranks, the largest parameter difference of the consolidated checkpoint, the
number of all-gathers in the step graph and the per-rank shard bytes."""
import copy
import json
import os
import sys

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import (XlaFullyShardedDataParallel as FSDP, checkpoint_module,
                                        consolidate_sharded_model_checkpoints)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from nets import GPT  # noqa: E402

STEPS = 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 32)
        self.drop = nn.Dropout(0.0)
        self.fc3 = nn.Linear(32, 3)

    def forward(self, x, y):
        h = torch.relu(self.fc1(x))
        h = self.drop(torch.relu(self.fc2(h)))
        return nn.functional.cross_entropy(self.fc3(h), y)


def make_model(kind):
    torch.manual_seed(0)
    return MLP() if kind == "mlp" else GPT(vocab=64, d=32, heads=4, layers=2, ctx=16)


def batches(kind, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(STEPS):
        if kind == "mlp":
            out.append((torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)))
        else:
            idx = torch.randint(0, 64, (4, 16), generator=g)
            out.append((idx, torch.roll(idx, -1, 1)))
    return out


def inner_modules(model, kind):
    """(parent, attribute) of the submodules nested configs wrap by hand."""
    if kind == "mlp":
        return [(model, "fc1"), (model, "fc2"), (model, "fc3")]
    return [(model.blocks, str(i)) for i in range(len(model.blocks))] + [(model, "head")]


# name -> (FSDP keyword arguments, nested, gradient checkpointing)
CONFIGS = {
    "zero3": ({}, False, False),
    "zero2": ({"reshard_after_forward": False}, False, False),
    "zero3_flat": ({"flatten_parameters": True}, False, False),
    "nested_zero3": ({}, True, False),
    "nested_zero2": ({"reshard_after_forward": False}, True, False),
    "nested_ckpt": ({}, True, True),
    "nested_flat_ckpt": ({"flatten_parameters": True}, True, True),
    "dim0": ({"shard_param_on_dim_0": True}, True, False),
}


def train(model, opt_step, params, data, dev):
    opt = torch.optim.AdamW(params, lr=1e-2)
    losses = []
    graph_text = None
    for i, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = model(x.to(dev), y.to(dev))
        loss.backward()
        if i == 0:
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            graph_text = torch_xla._XLAC._get_xla_tensors_text([loss] + grads)
        opt_step(opt)
        xm.mark_step()
        losses.append(loss.item())
    return losses, graph_text, opt


def main(index, out_dir, kind, names):
    dev = torch_xla.device()
    rank, world = xr.global_ordinal(), xr.world_size()
    data = batches(kind, rank)
    ref = make_model(kind).to(dev)
    ref_losses, _, _ = train(ref, lambda o: xm.optimizer_step(o), ref.parameters(), data, dev)
    ref_state = {k: v.cpu() for k, v in ref.state_dict().items()}
    result = {"world": world, "configs": {}}
    for name in names:
        kw, nested, ckpt = CONFIGS[name]
        model = make_model(kind)
        if nested:
            for parent, attr in inner_modules(model, kind):
                sub = getattr(parent, attr)
                setattr(parent, attr, FSDP(checkpoint_module(sub) if ckpt else sub, **kw))
        model = FSDP(model, **kw)
        losses, text, opt = train(model, lambda o: o.step(), model.parameters(), data, dev)
        shard_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                          if torch.is_tensor(t) and t.dim() > 0)
        prefix = os.path.join(out_dir, name)
        xm.save({"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()},
                f"{prefix}_rank-{rank:08d}-of-{world:08d}.pth", master_only=False)
        xm.rendezvous("saved-" + name)
        rec = {"loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses)),
               "losses": losses, "all_gathers": text.count("all_gather"),
               "shard_bytes": shard_bytes, "state_bytes": state_bytes}
        if rank == 0:
            full, _ = consolidate_sharded_model_checkpoints(prefix, "_rank-*-of-*.pth", save_model=False)
            rec["keys_match"] = sorted(full) == sorted(ref_state)
            rec["param_diff"] = max((full[k] - ref_state[k]).abs().max().item() for k in ref_state)
            plain = make_model(kind)
            plain.load_state_dict(full)   # the consolidated checkpoint loads into the unwrapped model
        lines = xm.rendezvous("result-" + name, json.dumps(rec).encode())
        recs = [json.loads(line) for line in lines]
        merged = recs[0]
        merged["loss_diff"] = max(r["loss_diff"] for r in recs)
        result["configs"][name] = merged
    ref_bytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    result["ref_param_bytes"] = ref_bytes
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    torch_xla.launch(main, args=(sys.argv[1], sys.argv[2], sys.argv[3:]))
