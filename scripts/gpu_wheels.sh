#!/usr/bin/env bash
# Fills .whl/ with what scripts/gpu_check.sh needs on the lent GPU machine (Python 3.12, torch,
# transformers, peft, accelerate, no network) and it lacks: the py3.12 manylinux wheels of
# pydantic and its needs (the only third-party imports of practicum's toy-task training path
# missing there; llguidance for the constrained-decoding check, a manylinux_2_31 wheel only;
# typing-extensions travels because pydantic wants a newer one than images often hold), and
# the SmolLM2 tokenizer (its GGUF package is over the 64 MiB a call carries).
# Then prints the device tool's `run` call.  PYTHON: an interpreter with practicum's
# dependencies (default .venv/bin/python); PIP_PYTHON: the one that runs `pip download`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
PIP_PY="${PIP_PYTHON:-python3}"
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 typing-extensions==4.16.0 llguidance==1.9.1)
LIMIT=$((32 * 1024 * 1024))  # well under the 64 MiB one call carries, tree included

if ! git check-ignore -q .whl; then  # the wheels travel by `carry`, never in a commit
  echo /.whl/ >> "$(git rev-parse --git-path info/exclude)"
fi
rm -rf .whl && mkdir -p .whl
"$PIP_PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 -d .whl "${WHEELS[@]}"
PYTHONPATH="$PWD/src" HF_HUB_OFFLINE=1 "$PY" -c "
from practicum.engine.models import load_builtin_tokenizer
load_builtin_tokenizer().save_pretrained('.whl/tokenizer')"

carried=$(du -sb .whl | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
ls -l .whl/*.whl .whl/tokenizer
echo "carried .whl/: $((carried / 1024)) KiB; working tree that travels: $((tree / 1024)) KiB"
if [ "$carried" -gt "$LIMIT" ] || [ $((carried + tree)) -gt $((60 * 1024 * 1024)) ]; then
  echo "gpu_wheels: too big for one device call (64 MiB with the tree)" >&2
  exit 1
fi
cat <<'RUN'
Device tool call (one H100; about 5 minutes of device time left for a rerun):
  run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=480)
The JSON comes back as $OUT/gpu_check.json with the log beside it; then give_back.
RUN
