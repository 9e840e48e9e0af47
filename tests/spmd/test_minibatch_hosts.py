"""MpDeviceLoader with ShardingSpec(minibatch=True) over two hosts on loopback:
each host loads only its half of the global batch, and the program over the
4-device global mesh trains exactly as one process fed the whole batch, and as
eager PyTorch on the CPU."""
import json
import os

import numpy as np

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spmd_minibatch_worker.py")


def test_minibatch_loader_over_two_hosts_trains_like_one(tmp_path, spmd_run, hosts_run):
    single, hosts = tmp_path / "single.json", tmp_path / "hosts.json"
    spmd_run(script=WORKER, args=(str(single), "single"), devices=4)
    hosts_run("spmd_minibatch_worker.py", (str(hosts), "hosts"), timeout=240)
    one, two = json.loads(single.read_text()), json.loads(hosts.read_text())
    assert (one["hosts"], two["hosts"], two["devices"]) == (1, 2, 4)
    # each host fed 8 rows; the loader gave the program the global batch of 16,
    # row-sharded over the 4 devices
    assert two["shapes"] == one["shapes"] == [[[16, 8], [16, 4]]] * 4
    assert two["specs"] == ["{devices=[4,1]0,1,2,3}"] * 4
    # the first weight (30 rows over 4 devices) stays padded at rest: 8 rows on each device
    assert two["global_shape"] == one["global_shape"] == [32, 8]
    assert two["local_rows"] == [8, 8] and one["local_rows"] == [8, 8, 8, 8]
    assert np.allclose(two["losses"], one["losses"], atol=1e-5), (two["losses"], one["losses"])
    assert np.allclose(two["losses"], two["eager_losses"], atol=1e-5), (two["losses"], two["eager_losses"])
    for p2, p1, pe in zip(two["params"], one["params"], two["eager_params"]):
        assert np.allclose(p2, p1, atol=1e-5) and np.allclose(p2, pe, atol=1e-5)
    # a 2x2 mesh: the batch axis across the hosts (each loads half), or within
    # each host (the hosts are replicas along it and each loads the whole batch)
    assert [ok for ok, _ in two["two_d"]] == [True, True], two["two_d"]
    assert [spec for _, spec in two["two_d"]] == [spec for _, spec in one["two_d"]]
