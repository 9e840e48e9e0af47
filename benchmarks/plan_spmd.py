"""Plan a pod-sized SPMD training step from one machine: compile it, run nothing.

    python benchmarks/plan_spmd.py --preset llama-8b --mesh fsdp=256
    python benchmarks/plan_spmd.py --preset llama-8b --mesh data=32,model=8 [--bf16]

A Llama-style decoder (RMSNorm, rotary attention with grouped KV heads, SwiGLU
MLP) is built on the meta device (no host memory for its weights); every
parameter, the AdamW state and the batch are then placeholders on the XLA
device (shapes and dtypes, no data) laid out over a virtual mesh of N CPU
devices with `mark_sharding`. One training step (forward, backward, AdamW) is
traced lazily, the decoder layers as one `scan_layers` loop (so the program
does not grow with depth; each layer's activations are recomputed in the
backward: gradient checkpointing), and compiled by XLA for the N devices, with
the parameters and optimizer state donated to their new values as in a real
step. Nothing runs.

Printed, per device: XLA's memory analysis of the compiled program (argument,
output, alias and temporary bytes; peak = argument + output - alias + temp)
beside the ideal, the collectives XLA's partitioner inserted (count and bytes
per step, a loop's body counted once per layer), and compile and wall time.

The ideal per device is (parameters + gradients + optimizer state) / N plus an
activation estimate from the config (see `ideal`): the layer inputs the loop
keeps for the backward, one layer's working set while it is recomputed and
differentiated (its weights gathered for the compute, its weight gradients
before they are reduced, its attention and MLP intermediates), and the
logits' working set. `--json` writes the report as JSON too.
"""
import argparse
import json
import math
import os
import sys
import time

PRESETS = {
    # Llama 3 8B: 8.03 B parameters
    "llama-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
                     vocab=128256, seq=2048),
    # tiny presets for tests and quick looks
    "tiny": dict(hidden=64, layers=4, heads=4, kv_heads=2, intermediate=128, vocab=256, seq=32),
    "small": dict(hidden=256, layers=4, heads=8, kv_heads=4, intermediate=768, vocab=1024, seq=128),
}


def parse_mesh(text):
    """"fsdp=256" / "data=32,model=8" -> [(axis, size), ...]."""
    axes = []
    for part in text.split(","):
        name, _, size = part.partition("=")
        if name not in ("fsdp", "data", "model") or not size.isdigit() or int(size) < 1:
            raise SystemExit(f"--mesh: expected axes fsdp=N or data=N,model=M, got {text!r}")
        axes.append((name, int(size)))
    names = [a for a, _ in axes]
    if len(set(names)) != len(names) or ("fsdp" in names and len(names) > 1):
        raise SystemExit(f"--mesh: fsdp=N alone, or data=N,model=M; got {text!r}")
    return axes


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="llama-8b", choices=sorted(PRESETS))
    p.add_argument("--mesh", default="fsdp=8", help="fsdp=N, or data=N,model=M (N*M devices)")
    p.add_argument("--batch", type=int, default=None,
                   help="global batch in sequences (default: one sequence per batch shard)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: the preset's)")
    for k in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab"):
        p.add_argument("--" + k.replace("_", "-"), type=int, default=None, help=f"override the preset's {k}")
    p.add_argument("--bf16", action="store_true", help="bfloat16 parameters, gradients and AdamW state")
    p.add_argument("--no-remat", action="store_true",
                   help="keep every layer's activations for the backward (no gradient checkpointing)")
    p.add_argument("--json", default=None, help="also write the report to this JSON file")
    p.add_argument("--hlo", default=None, help="write the compiled, partitioned HLO text to this file")
    return p.parse_args(argv)


def _config(a):
    cfg = dict(PRESETS[a.preset])
    for k in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "seq"):
        v = getattr(a, k)
        if v is not None:
            cfg[k] = v
    if cfg["hidden"] % cfg["heads"] or cfg["heads"] % cfg["kv_heads"]:
        raise SystemExit("hidden must divide by heads, and heads by kv_heads")
    return cfg


# -- the model (built on the meta device) --------------------------------------

def build_model(cfg, dtype):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    h, nh, nkv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    hd = h // nh

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h, dtype=dtype))

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
            return xf.to(x.dtype) * self.weight

    def rotary(x, seq):
        # x: (B, heads, S, hd); rotate pairs of channels by position * frequency
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
        ang = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = RMSNorm()
            self.wq = nn.Linear(h, nh * hd, bias=False, dtype=dtype)
            self.wk = nn.Linear(h, nkv * hd, bias=False, dtype=dtype)
            self.wv = nn.Linear(h, nkv * hd, bias=False, dtype=dtype)
            self.wo = nn.Linear(nh * hd, h, bias=False, dtype=dtype)
            self.mlp_norm = RMSNorm()
            self.gate = nn.Linear(h, cfg["intermediate"], bias=False, dtype=dtype)
            self.up = nn.Linear(h, cfg["intermediate"], bias=False, dtype=dtype)
            self.down = nn.Linear(cfg["intermediate"], h, bias=False, dtype=dtype)
            self.constrain = lambda x: x   # sharding constraint of the residual stream

        def forward(self, x):
            b, s, _ = x.shape
            y = self.attn_norm(x)
            q = self.wq(y).view(b, s, nh, hd).transpose(1, 2)
            k = self.wk(y).view(b, s, nkv, hd).transpose(1, 2)
            v = self.wv(y).view(b, s, nkv, hd).transpose(1, 2)
            q, k = rotary(q, s), rotary(k, s)
            rep = nh // nkv
            k = k[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
            v = v[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
            # causal attention written out: one (S, S) mask shared by every head
            mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
            scores = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(hd)) + mask
            a = torch.softmax(scores, dim=-1).to(v.dtype) @ v
            x = self.constrain(x + self.wo(a.transpose(1, 2).reshape(b, s, nh * hd)))
            y = self.mlp_norm(x)
            return self.constrain(x + self.down(F.silu(self.gate(y)) * self.up(y)))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg["vocab"], h, dtype=dtype)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg["layers"]))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(h, cfg["vocab"], bias=False, dtype=dtype)
            self.remat = True
            self.constrain = lambda x: x

        def forward(self, ids):
            from functorch.compile import min_cut_rematerialization_partition
            from torch_xla.experimental.scan_layers import scan_layers
            x = self.constrain(self.embed(ids))
            x = scan_layers(self.layers, x, is_layer_pure=True,
                            partition_fn=min_cut_rematerialization_partition if self.remat else None)
            return self.lm_head(self.norm(x))

    with torch.device("meta"):
        return Llama()


def param_spec(name, shape, axes):
    """The partition spec of a parameter. fsdp: every weight sharded on its first
    dimension over all devices. data+model: Megatron over `model` (column
    parallel wq/wk/wv/gate/up/lm_head/embed on their output dimension, row
    parallel wo/down on their input dimension) and FSDP over `data` on the other
    dimension; norms over `data`."""
    names = [a for a, _ in axes]
    if name == "embed.weight":
        # hidden over the batch axis (and vocab over `model`): the lookup's gradient
        # is a scatter into this device's slice, never into a whole table
        return ("model", "data") if "model" in names else (None, names[0])
    if names == ["fsdp"]:
        return ("fsdp",) + (None,) * (len(shape) - 1)
    data = "data" if "data" in names else None
    model = "model" if "model" in names else None
    if len(shape) == 1:
        return (data,)
    leaf = name.rsplit(".", 2)[-2] if "." in name else name
    if leaf in ("wo", "down"):
        return (data, model)     # (out, in): in over model
    return (model, data)          # (out, in) / (vocab, hidden): out over model


# -- the ideal -------------------------------------------------------------------

def ideal(cfg, n_params, layer_params, batch, axes, bytes_w, remat):
    """Ideal bytes per device: states (parameters, gradients, AdamW's two moments)
    spread over every device, plus an activation estimate -> dict of parts.

    Activations counted (per device, bytes of their dtypes):
      - carries: the input of every layer, which the loop keeps for the backward
        (remat; without it, every layer's whole working set is kept);
      - layer: the peak while one layer is recomputed and differentiated: its
        weights gathered for the compute plus their gradients before the
        reduce-scatter (over the fsdp/data axis; divided by the model axis),
        and its activations: attention scores, probabilities and their
        gradient (fp32), the q/k/v/output projections and the MLP's three
        intermediate-size values, each with its gradient;
      - head: the logits' working set, with the float32 logits, their softmax
        and gradient; the embedding's gradient (a scatter into a vocab x hidden
        value) is counted only while the head's is not live.
    The step's peak is the larger of layer and head, on top of the carries."""
    sizes = dict(axes)
    n = math.prod(sizes.values())
    dp = sizes.get("fsdp", sizes.get("data", 1))
    mp = sizes.get("model", 1)
    h, s, v = cfg["hidden"], cfg["seq"], cfg["vocab"]
    nh, nkv, inter = cfg["heads"], cfg["kv_heads"], cfg["intermediate"]
    hd = h // nh
    b = batch / dp                      # sequences per device
    states = 4 * n_params * bytes_w / n
    carries = cfg["layers"] * b * s * h * bytes_w
    # one layer: gathered weights + their gradients (split over model only)
    lw = 2 * layer_params * bytes_w / mp
    scores = 3 * b * (nh / mp) * s * s * 4
    proj = 2 * b * s * ((nh + 2 * nkv) * hd / mp + h) * bytes_w     # q,k,v,attn-out with grads
    mlp = 2 * 3 * b * s * (inter / mp) * bytes_w
    resid = 4 * b * s * h * 4                                        # norms in float32, their grads
    layer = lw + scores + proj + mlp + resid
    head = 3 * b * s * (v / mp) * 4 + 2 * v * h * bytes_w / mp
    if not remat:
        carries = cfg["layers"] * (scores / 3 * 2 + proj / 2 + mlp / 2 + resid / 2)
    act = carries + max(layer, head)
    return dict(states=states, carries=carries, layer=layer, head=head, activations=act, total=states + act)


# -- the plan --------------------------------------------------------------------

def plan(a):
    cfg = _config(a)
    axes = parse_mesh(a.mesh)
    n = math.prod(s for _, s in axes)
    t_wall = time.perf_counter()

    import numpy as np
    import torch
    import torch.nn as nn
    import torch_xla
    import torch_xla.core.xla_builder as xb
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.engine import api

    xr.use_spmd()
    if xr.global_runtime_device_count() != n:
        raise SystemExit(f"the mesh {a.mesh} needs {n} devices, the runtime has "
                         f"{xr.global_runtime_device_count()}")
    mesh = xs.Mesh(np.arange(n), tuple(s for _, s in axes), tuple(k for k, _ in axes))
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    bytes_w = 2 if a.bf16 else 4
    dev = torch_xla.device()
    names = [k for k, _ in axes]
    batch_axis = "fsdp" if "fsdp" in names else ("data" if "data" in names else None)
    dp = dict(axes).get(batch_axis, 1)
    batch = a.batch or dp

    model = build_model(cfg, dtype)
    model.remat = not a.no_remat
    resid_spec = (batch_axis, None, None)   # the residual stream: batch over the batch axis

    def constrain(x):
        return xs.mark_sharding_with_gradients(x, mesh, resid_spec)

    for layer in model.layers:
        layer.constrain = constrain
    model.constrain = constrain

    # placeholders for every parameter, laid out over the mesh
    n_params = 0
    for mod in model.modules():
        for pname, p in list(mod.named_parameters(recurse=False)):
            full = next(k for k, q in model.named_parameters() if q is p)
            ph = nn.Parameter(xb.create_placeholder_tensor(tuple(p.shape), p.dtype))
            xs.mark_sharding(ph, mesh, param_spec(full, p.shape, axes))
            setattr(mod, pname, ph)
            n_params += p.numel()
    layer_params = sum(p.numel() for p in model.layers[0].parameters())

    # AdamW state: placeholders laid out like their parameters
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
    for p in params:
        spec = param_spec(next(k for k, q in model.named_parameters() if q is p), p.shape, axes)
        st = {"step": torch.tensor(1.0)}
        for k in ("exp_avg", "exp_avg_sq"):
            st[k] = xb.create_placeholder_tensor(tuple(p.shape), p.dtype)
            xs.mark_sharding(st[k], mesh, spec)
        opt.state[p] = st

    ids = xb.create_placeholder_tensor((batch, cfg["seq"]), torch.int64)
    labels = xb.create_placeholder_tensor((batch, cfg["seq"]), torch.int64)
    xs.mark_sharding(ids, mesh, (batch_axis, None))
    xs.mark_sharding(labels, mesh, (batch_axis, None))

    # one step, traced lazily
    t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(ids).float().view(-1, cfg["vocab"]), labels.view(-1))
    loss.backward()
    opt.step()
    t_trace = time.perf_counter() - t0

    t0 = time.perf_counter()
    compiled = api.compile_pending()
    t_compile = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    text = compiled.as_text()
    if a.hlo:
        with open(a.hlo, "w") as f:
            f.write(text)
    coll = api.hlo_collectives(text)

    got = dict(arguments=mem.argument_size_in_bytes, outputs=mem.output_size_in_bytes,
               aliased=mem.alias_size_in_bytes, temporaries=mem.temp_size_in_bytes)
    got["peak"] = got["arguments"] + got["outputs"] - got["aliased"] + got["temporaries"]
    want = ideal(cfg, n_params, layer_params, batch, axes, bytes_w, model.remat)
    batch_bytes = 2 * batch * cfg["seq"] * 8 / dp
    # the ideal of each part of XLA's analysis
    ideal_parts = dict(arguments=3 * want["states"] / 4 + batch_bytes,
                       outputs=want["states"], aliased=3 * want["states"] / 4,
                       temporaries=want["activations"],
                       peak=want["total"] + batch_bytes)
    return dict(preset=a.preset, config=cfg, mesh=a.mesh, devices=n, batch=batch,
                dtype=str(dtype).replace("torch.", ""), remat=model.remat,
                parameters=n_params, per_device=got, ideal=ideal_parts, ideal_parts=want,
                collectives=[dict(kind=k, count=c, bytes=b) for k, c, b in coll],
                trace_s=t_trace, compile_s=t_compile, wall_s=time.perf_counter() - t_wall,
                command="python benchmarks/plan_spmd.py " + " ".join(sys.argv[1:]))


def _gib(x):
    return f"{x / 2**30:.3f} GiB" if x >= 2**26 else f"{x / 2**20:.2f} MiB"


def table(r):
    cfg = r["config"]
    lines = [f"plan: {r['preset']} ({r['parameters'] / 1e9:.2f} B parameters: hidden {cfg['hidden']}, "
             f"{cfg['layers']} layers, {cfg['heads']} heads / {cfg['kv_heads']} kv, intermediate "
             f"{cfg['intermediate']}, vocab {cfg['vocab']}, seq {cfg['seq']}), {r['dtype']}, global batch "
             f"{r['batch']}, mesh {r['mesh']} ({r['devices']} devices), AdamW, "
             f"{'layers recomputed in the backward' if r['remat'] else 'no recompute'}",
             "",
             "| per device | XLA | ideal | XLA / ideal |",
             "|---|---:|---:|---:|"]
    for k in ("arguments", "outputs", "aliased", "temporaries", "peak"):
        g, w = r["per_device"][k], r["ideal"][k]
        lines.append(f"| {k} | {_gib(g)} | {_gib(w)} | {g / w:.2f} |" if w else f"| {k} | {_gib(g)} | - | - |")
    ip = r["ideal_parts"]
    lines += ["",
              f"ideal: states (params + grads + AdamW m, v) / {r['devices']} = {_gib(ip['states'])}; "
              f"activations {_gib(ip['activations'])} = carries {_gib(ip['carries'])} + "
              f"max(layer {_gib(ip['layer'])}, head {_gib(ip['head'])}); peak = arguments + outputs "
              "- aliased + temporaries",
              ""]
    if r["collectives"]:
        lines += ["| collective | count per step | bytes per device per step |", "|---|---:|---:|"]
        for c in r["collectives"]:
            lines.append(f"| {c['kind']} | {c['count']} | {_gib(c['bytes'])} |")
        tot = sum(c["bytes"] for c in r["collectives"])
        lines.append(f"| total | {sum(c['count'] for c in r['collectives'])} | {_gib(tot)} |")
    else:
        lines.append("collectives: none")
    lines += ["", f"trace {r['trace_s']:.1f} s, compile {r['compile_s']:.1f} s, wall {r['wall_s']:.1f} s"]
    return "\n".join(lines)


def main(argv=None):
    a = _args(argv)
    axes = parse_mesh(a.mesh)
    n = math.prod(s for _, s in axes)
    # the virtual mesh: N CPU devices, set before torch_xla starts the backend
    if os.environ.get("CPU_NUM_DEVICES") != str(n) or os.environ.get("PJRT_DEVICE") != "CPU":
        env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(n), JAX_PLATFORMS="cpu")
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    r = plan(a)
    print(table(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
