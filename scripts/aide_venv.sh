#!/usr/bin/env bash
# Create (once) AIDE's own venv (aideml 0.2.2, the prompted-agent baseline). Its metadata asks
# for an unpinned torch and dozens of ML libraries (a 7.5 GB CUDA install); the agent itself
# needs only the small core below. Code it writes can import what this venv has (numpy,
# pandas, scikit-learn, scipy).   scripts/aide_venv.sh [VENV]   prints the venv's python.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
install() {
  venv_pip --no-deps "aideml==0.2.2"
  venv_pip "black==24.3.0" "funcy==2.0" "humanize==4.8.0" "jsonschema==4.19.2" \
    "numpy==1.26.2" "openai>=1.69.0" "anthropic>=0.20.0" "pandas==2.1.4" "requests>=2.32.4" \
    "scikit-learn==1.5.0" "rich==13.7.0" "scipy==1.11.4" "dataclasses_json>=0.6.4" \
    "omegaconf>=2.3.0" "loguru==0.7.2" "shutup>=0.2.0" "tqdm==4.66.3" "coolname>=2.2.0" \
    "igraph>=0.11.3" "genson>=1.2.0" "backoff" "python-dotenv"
}
venv_once "${1:-${PRACTICUM_AIDE_VENV:-.venv-aide}}" AIDE "under a minute" "import aide"
