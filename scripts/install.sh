#!/usr/bin/env bash
# Installs what the project needs into the current Python: torch first (the
# CPU build where one is on disk), so pip never pulls a CUDA build; then jax
# and this package with its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! $PY -c "import torch, sys; v=tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(0 if v>=(2,10) else 1)" 2>/dev/null; then
  $PY -m pip install -q "torch==2.13.0" || $PY -m pip install -q "torch>=2.10"
fi
$PY -m pip install -q -e ".[test]"
