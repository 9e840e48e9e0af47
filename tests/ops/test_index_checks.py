"""Out-of-range indices raise IndexError (as eager does) through deferred in-graph
checks: no host sync is added, and the error names the op, shapes and line."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

MSG = r"index out of range in aten::{op}: an index of shape \[{shape}\] into dimension {dim} of size {size}"


@pytest.mark.parametrize("op,make,shape,dim,size", [
    ("index", lambda x, d: x[torch.tensor([3, 12], device=d)], "2", 0, 10),
    ("index_select", lambda x, d: x.index_select(0, torch.tensor([3, 12], device=d)), "2", 0, 10),
    ("embedding", lambda x, d: torch.nn.functional.embedding(torch.tensor([1, 7], device=d), x.reshape(5, 2)), "2", 0, 5),
    ("index_put", lambda x, d: x.clone().index_put_((torch.tensor([11], device=d),), torch.tensor(1.0, device=d)),
     "1", 0, 10),
    ("scatter", lambda x, d: x.clone().scatter_(0, torch.tensor([15], device=d), torch.ones(1, device=d)), "1", 0, 10),
    ("gather", lambda x, d: x.gather(0, torch.tensor([10], device=d)), "1", 0, 10),
    ("nll_loss_forward", lambda x, d: torch.nn.functional.cross_entropy(x.reshape(2, 5), torch.tensor([1, 9], device=d)),
     "2", 1, 5),
])
def test_out_of_range_raises_index_error_naming_op_shape_and_line(dev, op, make, shape, dim, size):
    x = torch.arange(10.0, device=dev)
    with pytest.raises(IndexError, match=MSG.format(op=op, shape=shape, dim=dim, size=size)) as ei:
        make(x, dev).cpu()
    assert "test_index_checks.py" in str(ei.value)


def test_a_masked_write_of_more_rows_than_the_mask_selects_raises(dev):
    x = torch.zeros(5, 1, dtype=torch.int64, device=dev)
    x[torch.tensor([False, True, False, True, False], device=dev)] = torch.tensor([[1], [2]], device=dev)
    assert x.cpu().flatten().tolist() == [0, 1, 0, 2, 0]            # two rows for two elements
    x[torch.tensor([True, False, False, False, False], device=dev)] = torch.tensor([[9]], device=dev)
    assert x.cpu().flatten().tolist() == [9, 1, 0, 2, 0]            # one row broadcasts
    with pytest.raises(RuntimeError, match=r"shape mismatch in aten::index_put.*\[2, 1\].*other than 2") as ei:
        x[torch.tensor([False, False, True, False, False], device=dev)] = torch.tensor([[[1], [3]]], device=dev)
        x.cpu()
    assert "test_index_checks.py" in str(ei.value)
    with pytest.raises(RuntimeError, match="cannot be broadcast to indexing result"):   # eager, at the statement
        torch.zeros(5, 1)[torch.tensor([False, False, True, False, False])] = torch.tensor([[[1.], [3.]]])


def test_in_range_negative_and_ignored_indices_pass(dev):
    x = torch.arange(10.0, device=dev)
    assert x[torch.tensor([-1, 0], device=dev)].cpu().tolist() == [9.0, 0.0]
    logits = torch.randn(2, 3)
    target = torch.tensor([1, -100])
    want = torch.nn.functional.cross_entropy(logits, target)
    got = torch.nn.functional.cross_entropy(logits.to(dev), target.to(dev))
    torch.testing.assert_close(got.cpu(), want)


def test_a_training_loop_is_checked_without_an_extra_host_read(dev):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(8, 4).to(dev)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    xm.mark_step()
    met.clear_all()
    for step in range(4):
        ids = torch.tensor([step, 9 if step == 2 else 1])    # step 2 reads row 9 of 8
        opt.zero_grad()
        emb(ids.to(dev)).sum().backward()
        opt.step()
        if step < 2:
            xm.mark_step()
        else:
            with pytest.raises(IndexError, match=r"aten::embedding.*size 8.*test_index_checks.py"):
                xm.mark_step()
                xm.wait_device_ops()
            break
    # the steps before the bad one never read the device
    assert met.metric_data("TransferFromDeviceTime") is None


def test_with_checks_off_every_gather_clamps(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_xla
        d = torch_xla.device()
        x = torch.arange(10.0, device=d)
        i = torch.tensor([3, 12], device=d)
        print(x[i].cpu().tolist(), x.index_select(0, i).cpu().tolist(),
              torch.nn.functional.embedding(torch.tensor([7], device=d), x.reshape(5, 2)).cpu().tolist())
    """)
    env = dict(os.environ, XLA_CHECK_INDICES="0")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[3.0, 9.0] [3.0, 9.0] [[8.0, 9.0]]"


def test_a_bad_step_queued_behind_good_ones_is_still_reported(dev):
    # steps run ahead of the device; each barrier reads only the flags of runs
    # already finished, oldest first, and a later read finds the bad one
    torch.manual_seed(0)
    emb = torch.nn.Embedding(8, 4).to(dev)
    xm.mark_step()
    with pytest.raises(IndexError, match=r"aten::embedding.*size 8"):
        for step in range(6):
            ids = torch.tensor([step % 8, 12 if step == 1 else 0]).to(dev)
            out = emb(ids).sum()
            xm.mark_step()
        out.item()


def test_checks_of_dropped_results_do_not_join_the_next_graph(dev):
    import torch_xla.debug.metrics as met
    table = torch.randn(8, 4).to(dev)
    xm.mark_step()
    table[torch.tensor([1, 2]).to(dev)].sum()    # result dropped: nothing can read it
    xm.mark_step()
    met.clear_all()
    x = torch.randn(3, 17, 5).to(dev)
    compiled = []
    for _ in range(3):
        y = x * 2 + 1
        xm.mark_step()
        y.cpu()
        compiled.append(met.counter_value("UncachedCompile") or 0)
    # the first step's graph is the loop's graph: the later steps compile nothing
    assert compiled[0] == compiled[1] == compiled[2]
