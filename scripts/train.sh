#!/usr/bin/env bash
# The main job: installs what it needs, then trains the MNIST CNN on the default CPU device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh
export PYTHONUNBUFFERED=1
exec $PY examples/train_mnist.py "$@"
