"""The `xla` torch.distributed backend in one process: sub-groups and their
replica groups (`_mesh`), and the HLO text of collectives in graph dumps.

The world is patched (dist's default group reports another rank and size, as
upstream's tests do): a group's replica groups come from dist's world, and a
dump prints the collectives for it although this process is alone. Executing
such a graph in one process still gives the local values."""
import contextlib
import re
from unittest import mock

import pytest
import torch
import torch.distributed as dist

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.distributed import xla_backend

SPMD = {"xla_pg_options": {"spmd": True}}


@pytest.fixture(scope="module", autouse=True)
def _world():
    dist.init_process_group("xla", init_method="xla://")
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def _always(monkeypatch):
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")   # collectives of one process stay in the graph
    yield
    torch_xla.sync()


@contextlib.contextmanager
def world(rank, size, runtime=False):
    w = dist.group.WORLD
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(w, "rank", return_value=rank))
        stack.enter_context(mock.patch.object(w, "size", return_value=size))
        if runtime:
            stack.enter_context(mock.patch.object(xr, "global_ordinal", return_value=rank))
            stack.enter_context(mock.patch.object(xr, "world_size", return_value=size))
        yield


def hlo(tensors):
    return torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))


def instructions(text, opcode):
    return [line.strip() for line in text.splitlines() if re.search(rf"= .* {opcode}\(", line)]


# ---------------------------------------------------------------------------
# groups

def test_world_group_is_xla():
    pg = dist.group.WORLD
    assert isinstance(pg, xla_backend.ProcessGroupXla)
    assert (pg.rank(), pg.size(), pg._mesh) == (0, 1, [])


@pytest.mark.parametrize("rank,ranks,mesh", [
    (5, [4, 5, 6, 7], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]),
    (11, [8, 9, 10, 11], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]),
    (5, [1, 5, 9], [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]),
    (3, [3, 9], [[0, 6], [1, 7], [2, 8], [3, 9], [4, 10], [5, 11]]),
    (5, [5], [[r] for r in range(12)]),
    (5, list(range(12)), [list(range(12))]),
])
def test_new_group_mesh(rank, ranks, mesh):
    with world(rank, 12):
        pg = dist.new_group(ranks=ranks, pg_options=SPMD)
        assert isinstance(pg, xla_backend.ProcessGroupXla)
        assert (pg.size(), pg.rank()) == (len(ranks), ranks.index(rank))
        assert pg._mesh == mesh
        assert dist.get_rank(group=pg) == ranks.index(rank)
        assert dist.get_global_rank(pg, 0) == ranks[0]


@pytest.mark.parametrize("ranks", [[4, 5, 6], [0, 1, 2, 3, 4], [7, 8, 9, 10], [1, 5], [4, 7, 10],
                                   [1, 5, 10], [4, 8]])
def test_new_group_refuses_a_set_that_is_no_row_or_column(ranks):
    with world(ranks[0], 12), pytest.raises(ValueError, match="new_group"):
        dist.new_group(ranks=ranks, pg_options=SPMD)


def test_new_group_with_a_given_mesh():
    mesh = [[0, 3], [1, 2]]
    with world(2, 4):
        pg = dist.new_group(ranks=[1, 2], pg_options={"xla_pg_options": {"mesh": mesh}})
        assert pg._mesh == mesh and (pg.rank(), pg.size()) == (1, 2)
        with pytest.raises(ValueError, match="mesh"):   # not a partition of the 4 ranks
            dist.new_group(ranks=[1, 2], pg_options={"xla_pg_options": {"mesh": [[1, 2], [0, 1]]}})


def test_new_group_without_spmd_keeps_the_ranks_and_refuses_collectives():
    d = torch_xla.device()
    with world(2, 6):
        pg = dist.new_group(ranks=[2, 3])
        assert pg._mesh == [[2, 3]]
        with pytest.raises(NotImplementedError, match="spmd"):
            pg.allreduce([torch.ones(2, device=d)], dist.AllreduceOptions())


def test_new_group_of_the_world_without_ranks():
    with world(0, 12):
        pg = dist.new_group()
        assert isinstance(pg, xla_backend.ProcessGroupXla) and pg.size() == 12


def test_creator_called_directly():
    creator = dist.Backend._plugins["XLA"].creator_fn
    pg = creator(prefix_store=None, rank=3, size=8, timeout=None)
    assert isinstance(pg, xla_backend.ProcessGroupXla)
    assert (pg.rank(), pg.size(), pg._mesh) == (3, 8, [])


@pytest.mark.parametrize("op", ["allreduce_coalesced", "recv_anysource", "monitored_barrier"])
def test_unimplemented_ops_say_so(op):
    with pytest.raises(NotImplementedError, match="torch_xla"):
        getattr(dist.group.WORLD, op)(torch.ones(2, device=torch_xla.device()))


# ---------------------------------------------------------------------------
# HLO of collectives

def test_all_reduce_dump_names_the_replica_groups():
    d = torch_xla.device()
    with world(3, 6):
        pg = dist.new_group(ranks=[2, 3], pg_options=SPMD)
        t = torch.arange(2, device=d) + 7
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.AVG
        pg.allreduce([t], opts)
        text = hlo([t])
    ar = instructions(text, "all-reduce")
    assert len(ar) == 1 and "replica_groups={{0,1},{2,3},{4,5}}" in ar[0], text
    assert re.match(r"%all-reduce\.\d+ = s64\[2\]\{0\} all-reduce\(s64\[2\]\{0\} %", ar[0]), ar[0]
    ir_text = torch_xla._XLAC._get_xla_tensors_text([t])
    assert "scale=0.5" in ir_text and "groups=((0, 1), (2, 3), (4, 5))" in ir_text, ir_text
    # one process runs it locally: the group of one, scaled
    assert t.cpu().tolist() == [3, 4]


def test_world_all_reduce_dump_has_empty_replica_groups():
    t = torch.arange(3, device=torch_xla.device()) + 1.0
    dist.all_reduce(t)
    ar = instructions(hlo([t]), "all-reduce")
    assert len(ar) == 1 and "replica_groups={}" in ar[0]
    assert t.cpu().tolist() == [1.0, 2.0, 3.0]


def test_all_reduce_of_two_dtypes_is_one_collective_per_dtype():
    d = torch_xla.device()
    a, b, c = torch.ones(2, device=d), torch.ones(3, device=d), torch.ones(4, dtype=torch.int32, device=d)
    xm.all_reduce(xm.REDUCE_MAX, [a, b, c])
    ar = instructions(hlo([a, b, c]), "all-reduce")
    assert len(ar) == 2
    assert ar[0].split(" all-reduce(")[0].endswith("(f32[2]{0}, f32[3]{0})")
    assert ar[1].split(" all-reduce(")[0].endswith("s32[4]{0}")


def test_all_gather_dump_shapes():
    d = torch_xla.device()
    with world(3, 8):
        x = torch.arange(2, device=d) + 1
        outs = [torch.zeros_like(x) for _ in range(8)]
        dist.all_gather(outs, x)
        ag = instructions(hlo(outs), "all-gather")
    # the world group gathers from the job's processes: one here
    assert len(ag) == 1 and "replica_groups={}, dimensions={0}" in ag[0]
    assert ag[0].split(" = ")[1].startswith("s64[2]{0} all-gather(s64[2]{0} %")
    assert outs[0].cpu().tolist() == [1, 2] and outs[1].cpu().tolist() == [0, 0]


def test_all_gather_in_a_group_gathers_its_members():
    d = torch_xla.device()
    with world(5, 12):
        pg = dist.new_group(ranks=[1, 5, 9], pg_options=SPMD)
        x = torch.arange(2, device=d) + 1
        outs = [torch.zeros_like(x) for _ in range(3)]
        pg.allgather([outs], [x])
        ag = instructions(hlo(outs), "all-gather")
    assert len(ag) == 1
    assert ag[0].split(" = ")[1].startswith("s64[6]{0} all-gather(s64[2]{0} %")
    assert "replica_groups={{0,4,8},{1,5,9},{2,6,10},{3,7,11}}" in ag[0]
    assert [o.cpu().tolist() for o in outs] == [[1, 2]] * 3   # run alone: copies


def test_all_gather_coalesced_is_one_tuple_collective():
    d = torch_xla.device()
    pg = dist.Backend._plugins["XLA"].creator_fn(prefix_store=None, rank=3, size=8, timeout=None)
    x, y = torch.arange(2, device=d) + 1, torch.arange(5, device=d) + 1
    ox, oy = [torch.zeros_like(x)], [torch.zeros_like(y)]
    pg.allgather_coalesced([ox, oy], [x, y])
    ag = instructions(hlo(ox + oy), "all-gather")
    assert len(ag) == 1
    assert re.search(r"= \(s64\[2\]\{0\}, s64\[5\]\{0\}\) all-gather\(s64\[2\]\{0\} %\S+, s64\[5\]\{0\} %\S+\)",
                     ag[0]), ag[0]
    assert ox[0].cpu().tolist() == [1, 2] and oy[0].cpu().tolist() == [1, 2, 3, 4, 5]


def test_reduce_scatter_dump():
    d = torch_xla.device()
    x = torch.arange(2, device=d) + 1
    out = torch.zeros_like(x)
    dist.reduce_scatter(out, [x])
    rs = instructions(hlo([out]), "reduce-scatter")
    assert len(rs) == 1 and "replica_groups={}, dimensions={0}" in rs[0]
    assert out.cpu().tolist() == [1, 2]


def test_broadcast_dump_is_an_all_reduce_of_the_roots_values():
    d = torch_xla.device()
    t = torch.arange(2, device=d) + 1
    dist.broadcast(t, 0)
    text = hlo([t])
    assert len(instructions(text, "all-reduce")) == 1 and len(instructions(text, "replica-id")) == 1
    assert t.cpu().tolist() == [1, 2]


def test_all_to_all_and_permute_dumps():
    d = torch_xla.device()
    x = torch.arange(4, device=d) + 1
    a = xm.all_to_all(x, 0, 0, 1)
    p = xm.collective_permute(x, [(0, 0)])
    text = hlo([a, p])
    a2a, cp = instructions(text, "all-to-all"), instructions(text, "collective-permute")
    assert len(a2a) == 1 and "replica_groups={{0}}" in a2a[0]
    assert len(cp) == 1 and "source_target_pairs={{0,0}}" in cp[0]
    assert a.cpu().tolist() == p.cpu().tolist() == [1, 2, 3, 4]


def test_stablehlo_dump_has_the_collective():
    t = torch.ones(2, device=torch_xla.device())
    dist.all_reduce(t)
    assert "stablehlo.all_reduce" in xm.get_stablehlo([t])


# ---------------------------------------------------------------------------
# single-member groups

@pytest.mark.parametrize("rank", [0, 1])
def test_broadcast_in_a_single_member_group(rank):
    d = torch_xla.device()
    with world(rank, 2, runtime=True):
        tp = dist.new_group(ranks=[rank])
        assert tp._mesh == [[0], [1]]
        flags = torch.tensor([0.1, 0.2, 0.3], device=d)
        dist.broadcast(flags, src=rank, group=tp)
        ir_text = torch_xla._XLAC._get_xla_tensors_text([flags])
        assert f"root={rank}" in ir_text and "groups=((0), (1))" in ir_text, ir_text
        assert flags.cpu().tolist() == pytest.approx([0.1, 0.2, 0.3])
        assert (dist.get_rank(group=tp), dist.get_world_size(group=tp)) == (0, 1)
