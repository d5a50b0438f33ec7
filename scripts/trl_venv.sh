#!/usr/bin/env bash
# Create (once) TRL's own venv for benchmarks/vs_trl.py: TRL's GRPOTrainer with the same
# transformers/peft stack as practicum, but no practicum package in it.
#   scripts/trl_venv.sh [VENV]     prints the venv's python on stdout
# torch is pinned to the CPU build (2.13.0+cpu on these machines) and installed in the same pip
# command as TRL, so pip never resolves trl -> accelerate -> torch to a newer (CUDA) release.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${PRACTICUM_TRL_VENV:-.venv-trl}}"
PY="$VENV/bin/python"
if [ ! -f "$VENV/.installed" ]; then
  echo "practicum: setting up $VENV for TRL (a few minutes)" >&2
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -m pip install -q "torch==2.13.0" "trl==1.16.0" "transformers==5.23.0" "peft==0.21.2" \
    "accelerate==1.15.0" "datasets>=4" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -c "import torch, trl, peft; assert '+cpu' in torch.__version__ or not torch.cuda.is_available()" \
    || { echo "practicum: TRL did not install" >&2; exit 1; }
  touch "$VENV/.installed"
fi
echo "$PY"
