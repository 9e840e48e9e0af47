#!/usr/bin/env bash
# Installs what a command needs into the current Python, once: torch first (the
# CPU build where one is on disk), so pip never pulls a CUDA build; then jax and
# this package (editable) with the extras asked for. A second run that finds
# everything in place installs nothing.
#   bash scripts/install.sh            # the package and the examples' needs
#   bash scripts/install.sh test       # ... and the test suite's (the docs site's included)
#   bash scripts/install.sh docs       # the package and what the docs site needs
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRA=${1:-examples}
case "$EXTRA" in
  test) MODULES="torch jax sklearn pytest xdist expecttest absl pytorch_lightning transformers accelerate sphinx myst_parser matplotlib" ;;
  docs) MODULES="torch jax sphinx myst_parser matplotlib" ;;
  *)    MODULES="torch jax sklearn" ;;
esac
# fast check (no imports): every module is findable and torch_xla is this checkout
if $PY - "$PWD" $MODULES <<'PYEOF' 2>/dev/null
import importlib.util, os, sys
here = os.path.realpath(sys.argv[1])
sys.path = [p for p in sys.path if p and os.path.realpath(p) != here]  # installed, not this folder
spec = importlib.util.find_spec("torch_xla")
ok = spec is not None and os.path.realpath(spec.origin).startswith(here + os.sep)
ok = ok and all(importlib.util.find_spec(m) is not None for m in sys.argv[2:])
sys.exit(0 if ok else 1)
PYEOF
then
  echo "[install] everything for '$EXTRA' is already installed in $($PY -c 'import sys; print(sys.prefix)')"
  exit 0
fi
# pip's notes about index locations this machine's pip.conf names but lacks are noise here
quiet_pip() { $PY -m pip "$@" 2>&1 | sed "/is ignored: it is neither a file nor a directory/d"; }
echo "[install] installing into $($PY -c 'import sys; print(sys.prefix)') (first run: about 1-2 minutes)"
if ! $PY -c "import torch, sys; v=tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(0 if v>=(2,10) else 1)" 2>/dev/null; then
  echo "[install] torch (the CPU build 2.13.0 where it is on disk)"
  quiet_pip install -q --progress-bar off "torch==2.13.0" || quiet_pip install -q "torch>=2.10"
fi
echo "[install] jax and torch_xla (editable) with the '$EXTRA' extras"
quiet_pip install -q -e ".[$EXTRA]"
echo "[install] done"
