"""`torch-xla-sanity` / `python -m torch_xla.utils.sanity`: is this install working?

Prints the torch, torch_xla and jax versions and the devices found, runs a
simple calculation and one tiny training step on the XLA device, checks them
against the CPU, and says what is wrong when something is. Exit status 0
when every check passes, 1 otherwise.
"""
import argparse
import os
import sys
import time
import traceback

_failures = []


def _ok(msg):
    print(f"  [ok]   {msg}")


def _fail(msg, hint=None):
    _failures.append(msg)
    print(f"  [FAIL] {msg}")
    if hint:
        for line in hint.splitlines():
            print(f"         {line}")


def _verbose():
    from torch_xla.engine.api import config   # torch_xla is imported by the time a check runs
    return config.read("TORCH_XLA_SANITY_VERBOSE")


def _check(name, fn, hint=None):
    try:
        out = fn()
        _ok(f"{name}{': ' + out if out else ''}")
        return True
    except Exception as e:  # noqa: BLE001
        detail = f"{type(e).__name__}: {e}".splitlines()[0]
        _fail(f"{name}: {detail}", hint)
        if _verbose():
            traceback.print_exc()
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(prog="torch-xla-sanity", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    args = parser.parse_args(argv)
    if args.verbose:
        os.environ["TORCH_XLA_SANITY_VERBOSE"] = "1"
    _failures.clear()
    print("torch_xla sanity check")
    print(f"  python     {sys.version.split()[0]} ({sys.executable})")

    try:
        import torch
        print(f"  torch      {torch.__version__}")
    except Exception as e:  # noqa: BLE001
        _fail(f"import torch: {e}", "pip install 'torch>=2.10'")
        return _finish()
    try:
        import jax
        import jaxlib
        print(f"  jax        {jax.__version__} (jaxlib {jaxlib.__version__})")
    except Exception as e:  # noqa: BLE001
        _fail(f"import jax: {e}", "pip install jax (with the extra for your accelerator: jax[cuda12], jax[tpu])")
        return _finish()
    try:
        import torch_xla
        print(f"  torch_xla  {torch_xla.__version__} ({os.path.dirname(torch_xla.__file__)})")
    except Exception as e:  # noqa: BLE001
        _fail(f"import torch_xla: {type(e).__name__}: {e}",
              "torch_xla needs torch >= 2.10 (PrivateUse1 device hooks); reinstall it with pip")
        return _finish()

    from torch_xla.engine.api import config
    pjrt = config.raw("PJRT_DEVICE") if config.is_set("PJRT_DEVICE") else "CPU (default)"
    print(f"  PJRT_DEVICE={pjrt}")
    print("devices:")
    import torch_xla.runtime as xr

    def devices():
        from torch_xla.engine.api import jax_device, jax_platform
        import jax
        try:
            all_devs = jax.devices(jax_platform())
        except RuntimeError as e:
            raise RuntimeError(f"JAX found no {jax_platform()} backend ({e})") from None
        for d in all_devs:
            print(f"    {d.platform}:{d.id}  {getattr(d, 'device_kind', '')}")
        dev = jax_device()
        return f"xla:0 -> {dev.platform}:{dev.id} ({xr.device_type()}), world size {xr.world_size()}"

    if not _check("find the device", devices,
                  "PJRT_DEVICE selects the platform (CPU, CUDA, TPU); for CUDA install jax[cuda12], "
                  "for TPU jax[tpu]; unset PJRT_DEVICE to use the CPU"):
        return _finish()

    print("checks:")
    dev = torch_xla.device()

    def calc():
        import torch
        a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        b = torch.ones(4, 2)
        want = a @ b + 1
        t0 = time.perf_counter()
        got = ((a.to(dev) @ b.to(dev)) + 1).cpu()
        dt = time.perf_counter() - t0
        if not torch.allclose(got, want):
            raise AssertionError(f"XLA gave {got.tolist()}, CPU gave {want.tolist()}")
        return f"(a @ b + 1) matches the CPU ({dt * 1000:.0f} ms, compile included)"

    _check("simple calculation", calc)

    def train():
        import copy
        import torch
        import torch_xla.core.xla_model as xm
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        x = torch.randn(32, 8)
        y = x.sum(1, keepdim=True)
        mx = copy.deepcopy(model).to(dev)
        losses = []
        for m, xx, yy, on_xla in ((model, x, y, False), (mx, x.to(dev), y.to(dev), True)):
            opt = torch.optim.SGD(m.parameters(), lr=0.05)
            ls = []
            for _ in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(m(xx), yy)
                loss.backward()
                opt.step()
                if on_xla:
                    xm.mark_step()
                ls.append(loss.item())
            losses.append(ls)
        cpu, xla = losses
        if any(abs(a - b) > 1e-3 * max(1.0, abs(a)) for a, b in zip(cpu, xla)):
            raise AssertionError(f"losses differ: CPU {cpu}, XLA {xla}")
        if not xla[-1] < xla[0]:
            raise AssertionError(f"loss did not go down: {xla}")
        return f"3 SGD steps, losses {[round(v, 4) for v in xla]} match the CPU"

    _check("tiny training step", train)

    def metrics():
        import torch_xla.debug.metrics as met
        n = met.counter_value("UncachedCompile") or 0
        if n == 0:
            raise AssertionError("no compilation was counted")
        fb = met.executed_fallback_ops()
        extra = [f for f in fb if f != "aten::_local_scalar_dense"]
        return f"{n} graphs compiled" + (f"; ops on the CPU fallback: {extra}" if extra else "")

    _check("metrics", metrics)
    return _finish()


def _finish():
    if _failures:
        print(f"torch_xla is NOT working: {len(_failures)} problem(s) above.")
        return 1
    print("torch_xla is working.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
