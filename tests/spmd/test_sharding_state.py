"""What a tensor reports about its layout in SPMD mode, and the counters around
it (upstream's semantics):

- a value the logical device computed reports `{replicated}`, also when its graph
  read no sharded data (it ran on one device); an upload reports nothing;
- the gradient of `mark_sharding_with_gradients` lands in `x.grad` with the
  annotation (autograd detaches it into `.grad`; a detached alias keeps the layout);
- `ReplicateShardedData` counts host reads that assemble data spread over devices;
- `CreateOpSharding` counts sharding objects made: one per Mesh object and spec;
- `XLA_DUMP_POST_OPTIMIZATIONS=1` dumps the HLO as XLA compiled (partitioned) it.

Values are checked against eager CPU.
"""


def test_spec_strings_gradients_and_counters(spmd_run):
    spmd_run("""
        import os
        import numpy as np
        import torch
        import torch_xla
        import torch_xla.runtime as xr
        import torch_xla.debug.metrics as met
        import torch_xla.distributed.spmd as xs

        xr.use_spmd()
        n = xr.global_runtime_device_count()
        spec = torch_xla._XLAC._get_xla_sharding_spec
        kind = torch_xla._XLAC._get_xla_sharding_type
        mesh = xs.Mesh(np.arange(n), (1, n))

        # an upload has no layout; a computed value is replicated over the devices
        a, b = torch.randn(4, 4), torch.randn(4, 4)
        xa, xb = a.to("xla"), b.to("xla")
        assert spec(xa) == "" and kind(xa) is None
        c = xa @ xb
        torch_xla.sync()
        assert spec(c) == "{replicated}" and kind(c) == int(xs.ShardingType.REPLICATED), spec(c)
        assert spec(xa) == ""
        torch.testing.assert_close(c.cpu(), a @ b)

        # the gradient of mark_sharding_with_gradients carries the annotation
        x = torch.arange(8.0, device="xla", requires_grad=True)
        y = xs.mark_sharding_with_gradients(x, xs.Mesh(np.arange(n), (n,)), (0,))
        (y * y).sum().backward()
        assert spec(x.grad) == spec(y) == "{devices=[%d]%s}" % (n, ",".join(map(str, range(n)))), \\
            (spec(x.grad), spec(y))
        torch.testing.assert_close(x.grad.cpu(), 2 * torch.arange(8.0))
        assert spec(x.grad.detach()) == spec(y)

        # reading data spread over the devices counts ReplicateShardedData; an
        # unsharded upload does not
        met.clear_all()
        w = torch.randn(8, 8)
        xw = w.to("xla")
        xs.mark_sharding(xw, mesh, (0, 1))
        torch.testing.assert_close(xa.cpu(), a)
        assert not met.counter_value("ReplicateShardedData")
        torch.testing.assert_close(xw.cpu(), w)
        assert met.counter_value("ReplicateShardedData") == 1

        # sharding objects are made once per Mesh object and spec
        met.clear_all()
        for _ in range(3):
            xs.mark_sharding(torch.randn(1, n).to("xla"), mesh, (None, 1))   # not made by this mesh before
        assert met.counter_value("CreateOpSharding") == 1
        named = xs.Mesh(np.arange(n), (1, n), ("d", "m"))
        xs.mark_sharding(torch.randn(1, n).to("xla"), named, ("d", None))
        xs.mark_sharding(torch.randn(1, n).to("xla"), named, (0, None))   # the same spec by index
        assert met.counter_value("CreateOpSharding") == 2
        xs.mark_sharding(torch.randn(1, n).to("xla"), xs.Mesh(np.arange(n), (1, n)), (None, 1))
        assert met.counter_value("CreateOpSharding") == 3   # another Mesh object, as upstream
        assert mesh.get_op_sharding((0, 1)).sharding is mesh.get_op_sharding((0, 1)).sharding
        try:
            mesh.get_op_sharding((0, 2))
        except ValueError:
            pass
        else:
            raise AssertionError("an out-of-range axis must raise")

        # the post-optimization dump shows the partitioner's collectives
        t1, t2 = torch.randn(1, 128), torch.randn(128, 1)
        x1, x2 = t1.to("xla"), t2.to("xla")
        xs.mark_sharding(x1, mesh, (0, 1))
        t3 = x1 @ x2
        assert "all-reduce" not in torch_xla._XLAC._get_xla_tensors_hlo([t3])
        os.environ["XLA_DUMP_POST_OPTIMIZATIONS"] = "1"
        hlo = torch_xla._XLAC._get_xla_tensors_hlo([t3])
        del os.environ["XLA_DUMP_POST_OPTIMIZATIONS"]
        assert "all-reduce" in hlo, hlo
        torch.testing.assert_close(t3.cpu(), t1 @ t2)
        print("OK")
    """)
