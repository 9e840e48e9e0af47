#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and a python3 that has torch and
# jax with its CUDA plugin. Every part is bounded in time; logs go to $OUT (default
# /tmp/gpu_check) and each part's tail is printed.
#
#   bash scripts/gpu_check.sh            # about 5 minutes on one H100/H200
#
# Parts: what the machine has; torch-xla-sanity (a calculation and a few training steps on
# the XLA device against the CPU); benchmarks/bench_gpt.py's GPU configuration (ours, pure JAX,
# eager CUDA, inductor); benchmarks/bench_attention.py (flash_attention and F.sdpa against
# torch's CUDA SDPA); a smoke subset of the tests and the fuzzer's CI seeds with
# PJRT_DEVICE=CUDA (FUZZ_SEEDS: which fuzz seeds, default 0:300).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
CUDA_ENV=(env PJRT_DEVICE=CUDA JAX_PLATFORMS=cuda,cpu)

part() {   # part NAME SECONDS CMD...: runs CMD with a time limit, logs to $OUT/NAME.log
  local name=$1 secs=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 5 "$secs" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $(($(date +%s) - t0)) s (limit $secs s)"
  tail -n "${TAIL:-30}" "$OUT/$name.log"
}

part machine 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; \
  $PY -c 'import sys, torch, jax; print(sys.version.split()[0], \"torch\", torch.__version__, \"jax\", jax.__version__); \
print(torch.cuda.get_device_name(0)); print(jax.devices())'"

part sanity 90 "${CUDA_ENV[@]}" "$PY" -m torch_xla.utils.sanity --verbose

part bench_gpt 200 "$PY" benchmarks/bench_gpt.py --steps 5

# flash_attention and F.sdpa on the XLA device (cuDNN's fused kernel) against torch's CUDA SDPA
part bench_attention 120 "${CUDA_ENV[@]}" "$PY" benchmarks/bench_attention.py --steps 10

# Correctness on the GPU: the two run side by side, each with its own CPU workers.
part tests 130 "${CUDA_ENV[@]}" "$PY" -m pytest -q -rfE -n 6 -p no:cacheprovider \
  tests/views tests/executor tests/ir tests/api/test_module_to.py \
  tests/ops/test_fuzz_regressions.py tests/ops/test_fuzz_values.py tests/ops/test_eager_checks.py &
part fuzz 130 "${CUDA_ENV[@]}" "$PY" -m tests.fuzz.run --seeds "${FUZZ_SEEDS:-0:300}" --jobs 8 --out "$OUT/fuzz_cuda.json" &
wait
