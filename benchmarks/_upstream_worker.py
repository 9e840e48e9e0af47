"""Runs bench_core's tracing chain and cached steps under upstream torch_xla.

Started by bench_core.py with UPSTREAM_PYTHON (a Python where `pip install
torch==2.9.0 torch_xla==2.9.0` was done); prints one JSON line."""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    steps = args.get("steps", 20)
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from _models import torch_mlp, torch_mnist
    dev = torch_xla.device()
    x = torch.randn(16, device=dev)

    def chain(y):
        for _ in range(1500):
            y = y * 1.0001
            y = y + 0.5
        return y

    for _ in range(3):
        chain(x)
        xm.mark_step()
    per_op = []
    for _ in range(10):
        t0 = time.perf_counter()
        chain(x)
        per_op.append((time.perf_counter() - t0) / 3000)
        xm.mark_step()
    out = {"per_op": statistics.median(per_op) * 1e6}
    for kind, batch in (("mlp", 256), ("mnist", 64)):
        model, data, target, loss_fn = (torch_mlp if kind == "mlp" else torch_mnist)(batch)
        model = model.to(dev)
        data, target = data.to(dev), target.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            loss_fn(model(data), target).backward()
            opt.step()
            xm.mark_step()

        for _ in range(3):
            step()
        xm.wait_device_ops()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            xm.wait_device_ops()
            best = min(best, (time.perf_counter() - t0) / steps)
        out[kind] = best
    print(json.dumps(out))


if __name__ == "__main__":
    main()
