"""Attention timings: torch_xla's flash_attention (custom_kernel) and
F.scaled_dot_product_attention on the XLA device against torch's own SDPA
(CUDA when there is a GPU, else eager CPU), forward + backward per step.

  python benchmarks/bench_attention.py            # on a GPU: PJRT_DEVICE=CUDA JAX_PLATFORMS=cuda,cpu
  python benchmarks/bench_attention.py --quick    # small shapes, CPU, a few seconds

Each row: the implementation, seconds per step (median), and the ratio to
torch's SDPA; the last line is the table as JSON. torch's own row runs in a
process that does not import torch_xla: once `xla` is registered, PyTorch takes
it as its accelerator and its CUDA autograd fails (pytorch/pytorch#161129).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import median_step, run_point  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes on the CPU (a CI check)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--torch-row", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import torch
    import torch.nn.functional as F
    if not args.torch_row:
        import torch_xla
        from torch_xla.experimental.custom_kernel import flash_attention

    on_gpu = torch.cuda.is_available() and not args.quick
    b, h, s, d = (1, 2, 64, 32) if args.quick else (4, 16, 2048, 128)
    dtype = torch.float32 if args.quick else torch.bfloat16
    steps = 2 if args.quick else args.steps
    ref_dev = "cuda" if on_gpu else "cpu"
    dev = None if args.torch_row else torch_xla.device()
    g = torch.Generator().manual_seed(0)
    host = [torch.randn(b, h, s, d, generator=g).to(dtype) for _ in range(3)]
    scale = 1.0 / d ** 0.5

    def make(fn, device, sync):
        ts = [t.to(device).requires_grad_() for t in host]

        def step():
            for t in ts:
                t.grad = None
            fn(*ts).float().sum().backward()
        return step, sync

    def xla_sync():
        torch_xla.sync(wait=True)

    def ref_sync():
        if on_gpu:
            torch.cuda.synchronize()

    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    torch_name = "torch SDPA (%s)" % ref_dev
    if args.torch_row:
        step, sync = make(sdpa, ref_dev, ref_sync)
        print(json.dumps({"seconds": median_step(step, sync, steps, warmup=2, reps=3 if not args.quick else 1)}))
        return
    cases = [
        ("torch_xla flash_attention", make(lambda q, k, v: flash_attention(q, k, v, causal=True, sm_scale=scale),
                                           dev, xla_sync)),
        ("torch_xla F.sdpa", make(sdpa, dev, xla_sync)),
    ]
    ref = run_point(__file__, ["--torch-row", "--steps", str(args.steps)] + (["--quick"] if args.quick else []))
    if "error" in ref:
        print(f"{torch_name}: failed: {ref['error']}")
    rows = {torch_name: ref.get("seconds")}
    for name, (step, sync) in cases:
        try:
            def run():
                step()
                if sync is xla_sync:
                    torch_xla.sync()
            rows[name] = median_step(run, sync, steps, warmup=2, reps=3 if not args.quick else 1)
        except Exception as e:   # a failing row is reported, the others still run
            rows[name] = None
            print(f"{name}: failed: {type(e).__name__}: {e}")
    base = rows[torch_name]
    print(f"[attention fwd+bwd] B={b} H={h} S={s} D={d} {str(dtype).replace('torch.', '')}, causal")
    for name, t in rows.items():
        if t is None:
            print(f"{name:32s} failed")
        else:
            ratio = f"{t / base:.2f}x torch" if base else "-"
            print(f"{name:32s} {t * 1e3:9.3f} ms  {ratio}")
    print(json.dumps({"shape": [b, h, s, d], "dtype": str(dtype), "device": ref_dev,
                      "seconds": rows}))


if __name__ == "__main__":
    main()
