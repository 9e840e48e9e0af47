"""The benchmark models, written twice: PyTorch and pure JAX, same shapes and SGD momentum."""
import numpy as np


def torch_mlp(batch, width=512, layers=4, classes=10):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    mods = []
    d = width
    for _ in range(layers):
        mods += [nn.Linear(d, width), nn.ReLU()]
    mods.append(nn.Linear(width, classes))
    model = nn.Sequential(*mods)
    data = torch.randn(batch, width)
    target = torch.randint(0, classes, (batch,))
    return model, data, target, nn.CrossEntropyLoss()


def torch_mnist(batch):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, 5)
            self.conv2 = nn.Conv2d(10, 20, 5)
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, x):
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2))
            x = F.relu(self.fc1(torch.flatten(x, 1)))
            return F.log_softmax(self.fc2(x), dim=1)

    torch.manual_seed(0)
    return Net(), torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,)), nn.NLLLoss()


def _sgd_momentum(loss_fn, lr=0.01, mom=0.9):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(params, bufs, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        bufs = jax.tree_util.tree_map(lambda b, g: mom * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - lr * b, params, bufs)
        return params, bufs, x, y

    del jnp
    return step


def jax_mlp(batch, width=512, layers=4, classes=10, with_loss=False):
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)
    params = []
    for i in range(layers + 1):
        out = classes if i == layers else width
        params.append((jnp.asarray(rng.standard_normal((width, out), np.float32) * 0.04),
                       jnp.zeros((out,), jnp.float32)))

    def loss_fn(ps, x, y):
        h = x
        for i, (w, b) in enumerate(ps):
            h = h @ w + b
            if i < len(ps) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

    x = jnp.asarray(rng.standard_normal((batch, width), np.float32))
    y = jnp.asarray(rng.integers(0, classes, batch))
    bufs = jax.tree_util.tree_map(jnp.zeros_like, params)
    out = _sgd_momentum(loss_fn), (params, bufs, x, y)
    return out + (loss_fn,) if with_loss else out


def jax_mnist(batch, with_loss=False):
    import jax
    import jax.numpy as jnp
    from jax import lax
    rng = np.random.default_rng(0)

    def r(*s):
        return jnp.asarray(rng.standard_normal(s, np.float32) * 0.1)

    params = {"c1": r(10, 1, 5, 5), "b1": r(10), "c2": r(20, 10, 5, 5), "b2": r(20),
              "f1": r(320, 50), "g1": r(50), "f2": r(50, 10), "g2": r(10)}

    def conv(x, w, b):
        y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_fn(p, x, y):
        h = jax.nn.relu(pool(conv(x, p["c1"], p["b1"])))
        h = jax.nn.relu(pool(conv(h, p["c2"], p["b2"])))
        h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["f1"] + p["g1"])
        logp = jax.nn.log_softmax(h @ p["f2"] + p["g2"])
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

    x = jnp.asarray(rng.standard_normal((batch, 1, 28, 28), np.float32))
    y = jnp.asarray(rng.integers(0, 10, batch))
    bufs = jax.tree_util.tree_map(jnp.zeros_like, params)
    out = _sgd_momentum(loss_fn), (params, bufs, x, y)
    return out + (loss_fn,) if with_loss else out



# ResNet-18 (He et al.): a 7x7 stem, max-pool, four stages of two basic blocks
# (64, 128, 256, 512 channels), global average pool and a linear head. `width`
# scales the channels (a CI-sized variant: width 1/8, 32x32 images).
_RESNET_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


def _stages(width):
    return tuple((max(int(c * width), 4), s) for c, s in _RESNET_STAGES)


def torch_resnet18(batch, size=128, classes=100, width=1.0):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(y + (x if self.down is None else self.down(x)))

    stages = _stages(width)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            c0 = stages[0][0]
            self.stem = nn.Sequential(nn.Conv2d(3, c0, 7, 2, 3, bias=False), nn.BatchNorm2d(c0), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], c0
            for cout, stride in stages:
                blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    return (ResNet18(), torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,)),
            nn.CrossEntropyLoss())


def jax_resnet18(batch, size=128, classes=100, width=1.0, with_loss=False):
    """The same network in pure JAX: batch statistics in the forward pass and the
    running statistics (and batch counts) updated as torch's training mode does.
    The step takes and returns (params, momentum, running stats, x, y)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    rng = np.random.default_rng(0)

    def conv_w(cout, cin, k):
        scale = float(np.sqrt(2.0 / (cin * k * k)))
        return jnp.asarray(rng.standard_normal((cout, cin, k, k), np.float32) * scale)

    def bn(c):
        return {"g": jnp.ones((c,), jnp.float32), "b": jnp.zeros((c,), jnp.float32)}

    stages = _stages(width)
    c0, cl = stages[0][0], stages[-1][0]
    params = {"stem": conv_w(c0, 3, 7), "stem_bn": bn(c0), "blocks": [],
              "fc": jnp.asarray(rng.standard_normal((cl, classes), np.float32) * 0.04),
              "fc_b": jnp.zeros((classes,), jnp.float32)}
    strides, cin = [], c0
    for cout, stride in stages:
        for s in (stride, 1):
            blk = {"c1": conv_w(cout, cin, 3), "n1": bn(cout), "c2": conv_w(cout, cout, 3), "n2": bn(cout)}
            if s != 1 or cin != cout:
                blk["cd"], blk["nd"] = conv_w(cout, cin, 1), bn(cout)
            params["blocks"].append(blk)
            strides.append(s)
            cin = cout

    def conv(x, w, stride, pad):
        return lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def norm(x, p, st, new):
        n = x.shape[0] * x.shape[2] * x.shape[3]
        mean = x.mean((0, 2, 3), keepdims=True)
        var = ((x - mean) ** 2).mean((0, 2, 3), keepdims=True)
        m, v = lax.stop_gradient(mean.reshape(-1)), lax.stop_gradient(var.reshape(-1))
        new.append({"mean": 0.9 * st["mean"] + 0.1 * m, "var": 0.9 * st["var"] + 0.1 * v * (n / (n - 1)),
                    "n": st["n"] + 1})
        y = (x - mean) * lax.rsqrt(var + 1e-5)
        return y * p["g"][None, :, None, None] + p["b"][None, :, None, None]

    def loss_fn(p, stats, x, y):
        new, it = [], iter(stats)
        h = jax.nn.relu(norm(conv(x, p["stem"], 2, 3), p["stem_bn"], next(it), new))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)])
        for blk, s in zip(p["blocks"], strides):
            o = jax.nn.relu(norm(conv(h, blk["c1"], s, 1), blk["n1"], next(it), new))
            o = norm(conv(o, blk["c2"], 1, 1), blk["n2"], next(it), new)
            if "cd" in blk:
                h = norm(conv(h, blk["cd"], s, 0), blk["nd"], next(it), new)
            h = jax.nn.relu(o + h)
        logits = h.mean((2, 3)) @ p["fc"] + p["fc_b"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1)), new

    def bn_state(c):
        return {"mean": jnp.zeros((c,), jnp.float32), "var": jnp.ones((c,), jnp.float32),
                "n": jnp.zeros((), jnp.int32)}

    stats = [bn_state(stages[0][0])]
    for blk in params["blocks"]:
        c = blk["n1"]["g"].shape[0]
        stats += [bn_state(c), bn_state(c)] + ([bn_state(c)] if "cd" in blk else [])

    @jax.jit
    def step(params, bufs, stats, x, y):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, x, y)
        bufs = jax.tree_util.tree_map(lambda b, g: 0.9 * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - 0.01 * b, params, bufs)
        return params, bufs, stats, x, y

    x = jnp.asarray(rng.standard_normal((batch, 3, size, size), np.float32))
    y = jnp.asarray(rng.integers(0, classes, batch))
    bufs = jax.tree_util.tree_map(jnp.zeros_like, params)
    out = step, (params, bufs, stats, x, y)
    return out + (loss_fn,) if with_loss else out


def torch_gpt(batch, seq=64, vocab=512, d=128, heads=4, layers=2, blocks="torch"):
    """A small causal decoder (token + position embeddings, pre-norm blocks,
    tied output head); its loss is token cross-entropy, so both the embedding
    gathers and the loss's target gather are index-checked.

    blocks="torch": nn.TransformerEncoderLayer. blocks="explicit": the same
    block written out batch-first, as jax_gpt and most GPT code write it.
    nn.MultiheadAttention works sequence-first and flattens (seq, batch) with
    the batch as the minor dimension, which a batch-sharded SPMD program can
    only follow by all-gathering the batch, so SPMD benchmarks use "explicit"."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, h, mask):
            b, t, _ = h.shape
            q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // heads) ** 0.5 + mask, dim=-1)
            h = h + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return h + self.down(torch.relu(self.up(self.ln2(h))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            if blocks == "explicit":
                self.blocks = nn.ModuleList(Block() for _ in range(layers))
            else:
                layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
                self.blocks = nn.TransformerEncoder(layer, layers)
            self.norm = nn.LayerNorm(d)
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

        def forward(self, idx):
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            if blocks == "explicit":
                for blk in self.blocks:
                    h = blk(h, self.mask)
            else:
                h = self.blocks(h, mask=self.mask, is_causal=True)
            return self.norm(h) @ self.tok.weight.t()

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))

    torch.manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    return Decoder(), tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(), loss_fn


def jax_gpt(batch, seq=64, vocab=512, d=128, heads=4, layers=2, compute_dtype=None, with_loss=False):
    """The same decoder as torch_gpt (pre-norm blocks, ReLU feed-forward, biased
    projections, tied head) in pure JAX, trained with AdamW (hand-written: no
    optax here). -> (jitted step(state) -> state, state); compute_dtype=bfloat16
    casts the parameters for the forward pass as autocast does; with_loss: also
    the loss function loss(params, idx, tgt)."""
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)

    def r(*s, scale=0.02):
        return jnp.asarray(rng.standard_normal(s, np.float32) * scale)

    # explicit float32 everywhere: torch_xla turns on jax_enable_x64, under which
    # jnp.ones / jnp.full default to float64 when this runs in the same process
    f32 = jnp.float32

    def block():
        return {"ln1": (jnp.ones(d, f32), jnp.zeros(d, f32)), "ln2": (jnp.ones(d, f32), jnp.zeros(d, f32)),
                "qkv": (r(d, 3 * d), jnp.zeros(3 * d, f32)), "proj": (r(d, d), jnp.zeros(d, f32)),
                "up": (r(d, 4 * d), jnp.zeros(4 * d, f32)), "down": (r(4 * d, d), jnp.zeros(d, f32))}

    params = {"tok": r(vocab, d), "pos": r(seq, d), "blocks": [block() for _ in range(layers)],
              "norm": (jnp.ones(d, f32), jnp.zeros(d, f32))}
    mask = jnp.triu(jnp.full((seq, seq), -jnp.inf, f32), 1)

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p[0] + p[1]

    def attend(x, p):
        b, t, _ = x.shape
        q, k, v = jnp.split(x @ p["qkv"][0] + p["qkv"][1], 3, axis=-1)
        split = lambda z: z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = jax.nn.softmax((q @ k.transpose(0, 1, 3, 2)) / float(np.sqrt(d // heads)) + mask, axis=-1)
        out = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return out @ p["proj"][0] + p["proj"][1]

    def loss_fn(ps, idx, tgt):
        if compute_dtype is not None:
            ps = jax.tree_util.tree_map(lambda a: a.astype(compute_dtype), ps)
        h = ps["tok"][idx] + ps["pos"][None]
        for p in ps["blocks"]:
            h = h + attend(ln(h, p["ln1"]), p)
            f = jax.nn.relu(ln(h, p["ln2"]) @ p["up"][0] + p["up"][1])
            h = h + f @ p["down"][0] + p["down"][1]
        logits = (ln(h, ps["norm"]) @ ps["tok"].T).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], -1))

    @jax.jit
    def step(state):
        ps, m, v, t, idx, tgt = state
        grads = jax.grad(loss_fn)(ps, idx, tgt)
        t = t + 1
        lr, b1, b2, eps, wd = 1e-4, 0.9, 0.999, 1e-8, 0.01
        m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        ps = jax.tree_util.tree_map(
            lambda p, a, s: p * (1 - lr * wd) - lr * (a / c1) / (jnp.sqrt(s / c2) + eps), ps, m, v)
        return ps, m, v, t, idx, tgt

    tokens = rng.integers(0, vocab, (batch, seq + 1))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.zeros((), jnp.float32),
             jnp.asarray(tokens[:, :-1]), jnp.asarray(tokens[:, 1:]))
    return (step, state, loss_fn) if with_loss else (step, state)


def param_count(model):
    return sum(p.numel() for p in model.parameters())
