#!/usr/bin/env bash
# Create (once) TRL's own venv for benchmarks/vs_trl.py: TRL's GRPOTrainer with the same
# transformers/peft stack as practicum, but no practicum package in it.
#   scripts/trl_venv.sh [VENV]     prints the venv's python on stdout
# torch is pinned to the CPU build (2.13.0+cpu on these machines) and installed in the same pip
# command as TRL, so pip never resolves trl -> accelerate -> torch to a newer (CUDA) release.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
install() {
  venv_pip "torch==2.13.0"
  venv_pip "torch==2.13.0" "trl==1.16.0" "transformers==5.23.0" "peft==0.21.2" \
    "accelerate==1.15.0" "datasets>=4"
}
venv_once "${1:-${PRACTICUM_TRL_VENV:-.venv-trl}}" TRL "a few minutes" \
  "import torch, trl, peft; assert '+cpu' in torch.__version__ or not torch.cuda.is_available()"
