#!/usr/bin/env bash
# Create (once) mini-swe-agent's own venv (2.4.6, with litellm), the bash-only SWE scaffold.
#   scripts/mini_venv.sh [VENV]     prints the venv's python on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
install() { venv_pip "mini-swe-agent==2.4.6"; }
venv_once "${1:-${PRACTICUM_MINI_VENV:-.venv-mini}}" mini-swe-agent "under a minute" \
  "import minisweagent"
