"""Runs bench_core's measurements under upstream torch_xla.

Started by bench_core.py with UPSTREAM_PYTHON (a Python where `pip install
torch==2.9.0 torch_xla==2.9.0` was done), in a subprocess whose environment has
no PYTHONPATH (this project's torch_xla must not shadow upstream's). It calls
the functions of bench_core.py itself, so upstream runs the same step function,
batch sizes and step counts as the other competitors. argv[1] is a JSON object:

  {"mode": "main", "models": [[kind, batch], ...], "steps": N, "trace_reps": R}
      the tracing chain, then per model the cached step and per-step tracing
  {"mode": "compiled", "models": [[kind, batch], ...], "steps": N, "reps": R}
      per model the torch.compile(backend="openxla") training step: cached
      step time, executables run and compiled per step
  {"mode": "compile", "side": "xla", "kind": k, "batch": b, "steps": N}
      one model's first / second / steady step in this fresh process; no
      persistent cache (xr.initialize_cache is never called)
  {"mode": "cache", "kind": k, "batch": b, "path": dir, "started": t}
      xr.initialize_cache(dir), then the first training step and the steady
      step (bench_resnet's persistent-cache section)

Prints one JSON line."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"mode": "main", "models": [["mlp", 256]],
                                                              "steps": 20, "trace_reps": 20}
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import bench_core
    print(json.dumps(bench_core.worker_main(args)))


if __name__ == "__main__":
    main()
