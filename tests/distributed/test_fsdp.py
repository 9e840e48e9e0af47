"""XlaFullyShardedDataParallel: in one process against eager PyTorch on the CPU,
and on 2 and 4 processes against data-parallel training (fsdp_worker.py)."""
import functools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.distributed.fsdp import (XlaFullyShardedDataParallel as FSDP, checkpoint_module,
                                        consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts)
from torch_xla.distributed.fsdp.wrap import (always_wrap_policy, lambda_auto_wrap_policy, recursive_wrap,
                                             size_based_auto_wrap_policy, transformer_auto_wrap_policy)

from test_distributed import _free_port, _run  # noqa: F401  (same launcher helpers)

HERE = os.path.dirname(os.path.abspath(__file__))


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def _data(n=4):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)) for _ in range(n)]


def _train(model, dev, data, clip=None, opt_cls=torch.optim.SGD, **opt_kw):
    opt = opt_cls(model.parameters(), **(opt_kw or {"lr": 0.1, "momentum": 0.9}))
    losses, norms = [], []
    for x, y in data:
        opt.zero_grad()
        loss = ((model(x.to(dev)) - y.to(dev)) ** 2).mean()
        loss.backward()
        if clip is not None:
            norms.append(clip(model))
        opt.step()
        if dev.type == "xla":
            xm.mark_step()
        losses.append(loss.item())
    return losses, [float(n) for n in norms]


def _wrap(kw, nested=False, ckpt=False):
    m = _mlp()
    if nested:
        for i in (0, 2, 4):
            m[i] = FSDP(checkpoint_module(m[i]) if ckpt else m[i], **kw)
    return FSDP(m, **kw)


def _eager():
    m = _mlp()
    return m, _train(m, torch.device("cpu"), _data())[0]


CASES = {
    "zero3": ({}, False, False),
    "zero2": ({"reshard_after_forward": False}, False, False),
    "flat": ({"flatten_parameters": True}, False, False),
    "nested": ({}, True, False),
    "nested_ckpt": ({}, True, True),
    "nested_flat_ckpt": ({"flatten_parameters": True}, True, True),
    "dim0": ({"shard_param_on_dim_0": True}, True, False),
    "no_barriers": ({"optimization_barrier_in_forward": False, "optimization_barrier_in_backward": False},
                    True, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_process_trains_like_eager_and_consolidates(case):
    kw, nested, ckpt = CASES[case]
    ref, ref_losses = _eager()
    model = _wrap(kw, nested, ckpt)
    losses, _ = _train(model, torch_xla.device(), _data())
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    # only shards are parameters of the wrapped model; the optimizer saw those
    assert all(getattr(p, "_is_sharded", False) for p in model.parameters())
    full = consolidate_sharded_state_dicts([model.state_dict()], model.get_shard_metadata())
    assert sorted(full) == sorted(ref.state_dict())
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(full[k].cpu(), v, rtol=1e-5, atol=1e-6)


def test_checkpointing_gives_the_same_gradients():
    dev = torch_xla.device()
    x, y = (t.to(dev) for t in _data(1)[0])
    grads = []
    for ckpt in (False, True):
        model = _wrap({}, nested=True, ckpt=ckpt)
        ((model(x.requires_grad_()) - y) ** 2).mean().backward()
        grads.append([p.grad.cpu() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_bf16_compute_dtype_casts_gathered_parameters_and_inputs():
    ref, ref_losses = _eager()
    model = _wrap({"compute_dtype": torch.bfloat16, "fp32_reduce_scatter": True}, nested=True)
    losses, _ = _train(model, torch_xla.device(), _data())
    assert all(p.dtype == torch.float32 for p in model.parameters())   # shards stay fp32
    torch.testing.assert_close(losses, ref_losses, rtol=0.05, atol=0.02)


def test_clip_grad_norm_matches_torch():
    clip_eager = functools.partial(torch.nn.utils.clip_grad_norm_, max_norm=0.05)
    ref = _mlp()
    ref_losses, ref_norms = _train(ref, torch.device("cpu"), _data(), clip=lambda m: clip_eager(m.parameters()))
    model = _wrap({}, nested=True)
    losses, norms = _train(model, torch_xla.device(), _data(), clip=lambda m: m.clip_grad_norm_(0.05))
    torch.testing.assert_close(norms, ref_norms, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)


def test_no_sync_accumulates_then_reduces_once():
    dev = torch_xla.device()
    (x1, y1), (x2, y2) = _data(2)
    ref = _mlp()
    for x, y in ((x1, y1), (x2, y2)):
        ((ref(x) - y) ** 2).mean().backward()
    model = _wrap({}, nested=True)
    with model.no_sync():
        ((model(x1.to(dev)) - y1.to(dev)) ** 2).mean().backward()
    assert all(p.grad is None for p in model.parameters())
    ((model(x2.to(dev)) - y2.to(dev)) ** 2).mean().backward()
    full = consolidate_sharded_state_dicts(
        [{n: p.grad for n, p in model.named_parameters()}], model.get_shard_metadata())
    for n, p in ref.named_parameters():
        torch.testing.assert_close(full[n].cpu(), p.grad, rtol=1e-5, atol=1e-6)


def test_a_sharded_parameter_outside_forward_is_a_clear_error():
    model = _wrap({}, nested=True)
    with pytest.raises(RuntimeError, match=r"Linear\.weight is sharded by XlaFullyShardedDataParallel"):
        model.module[0].module.weight + 1
    with pytest.raises(RuntimeError, match=r"Linear\.weight is sharded"):
        torch.nn.functional.linear(torch.ones(2, 8, device=torch_xla.device()), model.module[0].module.weight)


def test_xm_optimizer_step_refuses_sharded_parameters():
    model = _wrap({})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data(1)[0]
    ((model(x.to(torch_xla.device())) - y.to(torch_xla.device())) ** 2).mean().backward()
    with pytest.raises(RuntimeError, match="call optimizer.step\\(\\) directly"):
        xm.optimizer_step(opt)


def test_loading_shards_of_another_world_size_is_a_clear_error():
    model = _wrap({})
    sd = model.state_dict()
    key = next(k for k in sd if "_fsdp_shard" in k)
    sd[key] = torch.zeros(sd[key].numel() // 2)
    with pytest.raises(RuntimeError, match="another world size"):
        model.load_state_dict(sd)


def test_wrapping_twice_and_double_auto_wrap_are_refused():
    inner = FSDP(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="already wrapped"):
        FSDP(inner)
    m = nn.Sequential(FSDP(nn.Linear(2, 2)), nn.Linear(2, 2))
    with pytest.raises(ValueError, match="already wrapped"):
        FSDP(m, auto_wrap_policy=always_wrap_policy)


def _wrapped_names(model):
    return sorted(n for n, m in model.named_modules() if isinstance(m, FSDP))


def test_auto_wrap_policies():
    big = functools.partial(size_based_auto_wrap_policy, min_num_params=200)
    model = FSDP(_mlp(), auto_wrap_policy=big)
    # Linear(16,16) has 272 parameters, Linear(8,16) 144, Linear(16,4) 68
    assert _wrapped_names(model) == ["", "_fsdp_wrapped_module.2"]
    by_type = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    model = FSDP(_mlp(), auto_wrap_policy=by_type)
    assert _wrapped_names(model) == ["", "_fsdp_wrapped_module.0", "_fsdp_wrapped_module.2",
                                     "_fsdp_wrapped_module.4"]
    by_lambda = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: isinstance(m, nn.Tanh))
    model = FSDP(_mlp(), auto_wrap_policy=by_lambda)
    assert _wrapped_names(model) == ["", "_fsdp_wrapped_module.3"]
    # the wrapped model still trains like eager
    _, ref_losses = _eager()
    model = FSDP(_mlp(), auto_wrap_policy=by_type,
                 auto_wrapper_callable=lambda m, *a, **kw: FSDP(checkpoint_module(m), *a, **kw))
    losses, _ = _train(model, torch_xla.device(), _data())
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)


def test_recursive_wrap_counts_parameters():
    calls = []

    def wrapper(m, **kw):
        calls.append((type(m).__name__, kw))
        return nn.Sequential(m)
    m = _mlp()
    _, n = recursive_wrap(m, functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear}),
                          wrapper, set(), set(), only_wrap_children=True, flag=1)
    assert n == sum(p.numel() for p in _mlp().parameters())
    assert calls == [("Linear", {"flag": 1})] * 3


def test_consolidation_cli_and_checkpoint_set_errors(tmp_path):
    model = _wrap({"flatten_parameters": True}, nested=True)
    _train(model, torch_xla.device(), _data(2))
    prefix = str(tmp_path / "ck")
    ckpt = {"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()}
    xm.save(ckpt, prefix + "_rank-00000000-of-00000001.pth", master_only=False)
    r = subprocess.run([sys.executable, "-m", "torch_xla.distributed.fsdp.consolidate_sharded_ckpts",
                        "--ckpt_prefix", prefix, "--ckpt_suffix", "_rank-*-of-*.pth"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    full = torch.load(prefix + "_consolidated.pth")["model"]
    plain = _mlp()
    plain.load_state_dict(full)   # loads into the unwrapped model
    x = _data(1)[0][0]
    torch.testing.assert_close(plain(x), model(x.to(torch_xla.device())).cpu(), rtol=1e-5, atol=1e-6)
    # a file of another job in the set: refused, naming it
    meta = dict(ckpt["shard_metadata"], world_size=2, rank=1)
    torch.save({"model": ckpt["model"], "shard_metadata": meta}, prefix + "_rank-00000001-of-00000002.pth")
    with pytest.raises(ValueError, match="job of"):
        consolidate_sharded_model_checkpoints(prefix, "_rank-*-of-*.pth", save_model=False)
    with pytest.raises(FileNotFoundError):
        consolidate_sharded_model_checkpoints(str(tmp_path / "none"), "*.pth")


def _worker(tmp_path, procs, model, configs, timeout):
    rc, log, _ = _run(["fsdp_worker.py", str(tmp_path), model] + configs, timeout=timeout,
                      CPU_NUM_DEVICES=procs, MASTER_PORT=_free_port())
    assert rc == 0, log[-4000:]
    return json.load(open(tmp_path / "result.json"))


def test_fsdp_on_2_processes_matches_data_parallel(tmp_path):
    res = _worker(tmp_path, 2, "mlp", ["zero3", "zero2", "zero3_flat", "nested_zero3", "nested_ckpt", "dim0"],
                  timeout=300)
    assert res["world"] == 2
    for name, r in res["configs"].items():
        assert r["loss_diff"] < 1e-5, (name, r)
        assert r["param_diff"] < 1e-4, (name, r)
        assert r["keys_match"], name


@pytest.mark.slow
def test_fsdp_gpt_on_4_processes_matches_data_parallel(tmp_path):
    res = _worker(tmp_path, 4, "gpt", ["nested_zero3", "nested_zero2", "nested_flat_ckpt"], timeout=480)
    cfg = res["configs"]
    for name, r in cfg.items():
        assert r["loss_diff"] < 1e-5, (name, r)
        assert r["param_diff"] < 1e-3, (name, r)   # AdamW: 5 steps of lr 1e-2 amplify rounding
        assert r["keys_match"], name
        # each rank holds a quarter of the parameters (plus padding) and of AdamW's state
        assert r["shard_bytes"] < res["ref_param_bytes"] / 4 * 1.35, (name, r)
        assert r["state_bytes"] == 2 * r["shard_bytes"], (name, r)
    # ZeRO-3 gathers the saved parameters again in backward; ZeRO-2 keeps them
    assert cfg["nested_zero3"]["all_gathers"] > cfg["nested_zero2"]["all_gathers"]


@pytest.mark.slow
def test_upstream_fsdp_mnist_runs_unchanged_on_4_processes(tmp_path):
    up = os.environ.get("UPSTREAM_XLA")
    script = os.path.join(up or "", "test", "test_train_mp_mnist_fsdp_with_ckpt.py")
    if not up or not os.path.exists(script):
        pytest.skip("set UPSTREAM_XLA to a pytorch/xla checkout to run its FSDP MNIST test")
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import run_upstream_tests
    run_upstream_tests._write_torchvision_shim(str(tmp_path))
    rc, log, _ = _run([script, "--fake_data", "--num_epochs=1", "--use_nested_fsdp", "--use_gradient_checkpointing",
                       "--ckpt_prefix", str(tmp_path / "ck" / "final")], timeout=600, CPU_NUM_DEVICES=4,
                      PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.join(up, "test"), os.path.dirname(os.path.dirname(HERE))]))
    assert rc == 0, log[-4000:]
    assert "Checkpoint consolidated, Accuracy=" in log


def test_guide_snippet_and_resuming_from_a_rank_checkpoint(tmp_path):
    import torch_xla.runtime as xr

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(8, 8), nn.Linear(4, 8)

        def forward(self, x, y):
            return self.a(x) * self.b(y)

    dev = torch_xla.device()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(2, 8, generator=g).to(dev), torch.randn(2, 4, generator=g).to(dev)) for _ in range(4)]

    def step(model, optim, x, y):   # the guide's loop, as written there
        output = model(x, y)
        loss = output.sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
        xm.mark_step()
        return loss.item()

    model = FSDP(TwoInputs())
    optim = torch.optim.Adam(model.parameters(), lr=0.0001)
    straight = [step(model, optim, *b) for b in batches]

    model = FSDP(TwoInputs())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0001)
    resumed = [step(model, optimizer, *b) for b in batches[:2]]
    ckpt = {'model': model.state_dict(), 'shard_metadata': model.get_shard_metadata(),
            'optimizer': optimizer.state_dict()}
    ckpt_path = str(tmp_path / f'rank-{xr.global_ordinal()}-of-{xr.world_size()}.pth')
    xm.save(ckpt, ckpt_path, master_only=False)
    del model, optimizer
    model = FSDP(TwoInputs())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0001)
    loaded = torch.load(ckpt_path, weights_only=False)
    model.load_state_dict(loaded['model'])
    optimizer.load_state_dict(loaded['optimizer'])
    resumed += [step(model, optimizer, *b) for b in batches[2:]]
    torch.testing.assert_close(resumed, straight, rtol=1e-6, atol=1e-7)
