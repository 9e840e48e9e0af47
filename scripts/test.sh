#!/usr/bin/env bash
# The test suite: installs what it needs, then runs every tier (fast and slow).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh test
export PYTHONUNBUFFERED=1 JAX_PLATFORMS=cpu
exec $PY -m pytest -q -n 2 --dist loadfile --durations=15 "$@"
