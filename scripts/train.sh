#!/usr/bin/env bash
# The main job: installs what it needs, then trains the MNIST CNN on the default CPU device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh
export PYTHONUNBUFFERED=1
# compiled graphs are kept on disk: a second run loads them instead of compiling
export XLA_PERSISTENT_CACHE_PATH=${XLA_PERSISTENT_CACHE_PATH:-$PWD/.cache/xla}
exec $PY examples/train_mnist.py "$@"
