#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and a python3 that has torch and
# jax with its CUDA plugin. Every part is bounded in time; logs go to $OUT (default
# /tmp/gpu_check) and each part's tail is printed.
#
#   bash scripts/gpu_check.sh            # about 7 minutes on one H100/H200
#
# Parts: what the machine has; torch-xla-sanity (a calculation and a few training steps on
# the XLA device against the CPU); benchmarks/bench_gpt.py's GPU configuration (ours, pure JAX,
# eager CUDA, inductor, and our torch.compile(openxla) and
# torch_xla.compile(replay=True) steps); benchmarks/bench_attention.py (flash_attention and F.sdpa against
# torch's CUDA SDPA); a smoke subset of the tests and the fuzzer's CI seeds with
# PJRT_DEVICE=CUDA (FUZZ_SEEDS: which fuzz seeds, default 0:300).
#
#   bash scripts/gpu_check.sh --cpu      # the dry run: every part, CPU-sized, on the CPU (CI runs it)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
CUDA_ENV=(env PJRT_DEVICE=CUDA JAX_PLATFORMS=cuda,cpu)
SIZE=(--steps 5) ATT_SIZE=(--steps 10) JOBS=6 SEEDS=${FUZZ_SEEDS:-0:300}
TESTS=(tests/views tests/executor tests/ir tests/api/test_module_to.py tests/dynamo/test_compile_replay.py
  tests/dynamo/test_bridge_step_join.py tests/dynamo/test_openxla_backend.py
  tests/ops/test_fuzz_regressions.py tests/ops/test_fuzz_values.py tests/ops/test_eager_checks.py)
if [ "${1:-}" = "--cpu" ]; then
  CUDA_ENV=(env PJRT_DEVICE=CPU JAX_PLATFORMS=cpu)
  SIZE=(--quick) ATT_SIZE=(--quick) JOBS=2 SEEDS=${FUZZ_SEEDS:-0:4}
  TESTS=(tests/api/test_module_to.py)
fi

part() {   # part NAME SECONDS CMD...: runs CMD with a time limit, logs to $OUT/NAME.log
  local name=$1 secs=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 5 "$secs" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $(($(date +%s) - t0)) s (limit $secs s)"
  tail -n "${TAIL:-30}" "$OUT/$name.log"
}

part machine 30 bash -c "{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo 'no nvidia-smi'; }; \
  $PY -c 'import sys, torch, jax; print(sys.version.split()[0], \"torch\", torch.__version__, \"jax\", jax.__version__); \
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"torch sees no GPU\"); print(jax.devices())'"

part sanity 90 "${CUDA_ENV[@]}" "$PY" -m torch_xla.utils.sanity --verbose

part bench_gpt 330 "$PY" benchmarks/bench_gpt.py "${SIZE[@]}"

# flash_attention and F.sdpa on the XLA device (cuDNN's fused kernel) against torch's CUDA SDPA
part bench_attention 120 "${CUDA_ENV[@]}" "$PY" benchmarks/bench_attention.py "${ATT_SIZE[@]}"

# Correctness on the GPU: the two run side by side, each with its own CPU workers.
part tests 130 "${CUDA_ENV[@]}" "$PY" -m pytest -q -rfE -n "$JOBS" -p no:cacheprovider "${TESTS[@]}" &
part fuzz 130 "${CUDA_ENV[@]}" "$PY" -m tests.fuzz.run --seeds "$SEEDS" --jobs "$JOBS" --out "$OUT/fuzz_cuda.json" &
wait
