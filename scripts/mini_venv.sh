#!/usr/bin/env bash
# Create (once) mini-swe-agent's own venv (2.4.6, with litellm), the bash-only SWE scaffold.
#   scripts/mini_venv.sh [VENV]     prints the venv's python on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${PRACTICUM_MINI_VENV:-.venv-mini}}"
PY="$VENV/bin/python"
if [ ! -f "$VENV/.installed" ]; then
  echo "practicum: setting up $VENV for mini-swe-agent (under a minute)" >&2
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q "mini-swe-agent==2.4.6" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -c "import minisweagent" || { echo "practicum: mini-swe-agent did not install" >&2; exit 1; }
  touch "$VENV/.installed"
fi
echo "$PY"
