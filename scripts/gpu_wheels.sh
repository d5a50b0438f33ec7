#!/usr/bin/env bash
# Fills .whl/ with what scripts/gpu_check.sh needs on the lent GPU machine (Python 3.12, torch,
# transformers, peft, accelerate, no network) and it lacks: the py3.12 manylinux wheels of
# pydantic and its needs (the only third-party imports of practicum's toy-task training path
# missing there; llguidance for the constrained-decoding check, a manylinux_2_31 wheel only;
# typing-extensions travels because pydantic wants a newer one than images often hold), and
# the SmolLM2 tokenizer (its GGUF package is over the 64 MiB a call carries), and that GGUF
# itself (the Q4_1 quantised SmolLM2-135M-Instruct, 94 MiB) cut in three parts under
# .gguf_parts/, each carried by one call (ignored paths stay on the machine between calls),
# joined and checked against its sha256 there by scripts/gpu_check.sh, with the gguf wheel to
# dequantise it: the check's reference run is then a real pretrained model.
# Then prints the device tool's `run` call.  PYTHON: an interpreter with practicum's
# dependencies (default .venv/bin/python); PIP_PYTHON: the one that runs `pip download`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
PIP_PY="${PIP_PYTHON:-python3}"
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 typing-extensions==4.16.0 llguidance==1.9.1 gguf==0.19.0)
LIMIT=$((32 * 1024 * 1024))  # well under the 64 MiB one call carries, tree included

for folder in .whl .gguf_parts; do  # these travel by `carry`, never in a commit
  git check-ignore -q "$folder" || echo "/$folder/" >> "$(git rev-parse --git-path info/exclude)"
done
rm -rf .whl && mkdir -p .whl
"$PIP_PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 -d .whl "${WHEELS[@]}"
PYTHONPATH="$PWD/src" HF_HUB_OFFLINE=1 "$PY" -c "
from practicum.engine.models import load_builtin_tokenizer
load_builtin_tokenizer().save_pretrained('.whl/tokenizer')"

GGUF=$(PYTHONPATH="$PWD/src" "$PY" -c "
from practicum.engine.models import BUILTIN_MODELS, DEFAULT_MODEL, _package_folder
b = BUILTIN_MODELS[DEFAULT_MODEL]; print(_package_folder(b) / b.gguf_file)")
rm -rf .gguf_parts && mkdir .gguf_parts
split -n 3 -d -a 1 "$GGUF" .gguf_parts/part  # part0 part1 part2, joined in order there
(cd .gguf_parts && sha256sum part0 part1 part2) > .whl/gguf_parts.sha256
echo "$(basename "$GGUF") $(sha256sum "$GGUF" | cut -d' ' -f1)" > .whl/gguf_file.sha256

carried=$(du -sb .whl | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
ls -l .whl/*.whl .whl/tokenizer
echo "carried .whl/: $((carried / 1024)) KiB; working tree that travels: $((tree / 1024)) KiB"
part=$(du -b .gguf_parts/part0 | cut -f1)  # the first call carries .whl/ and part0
if [ "$carried" -gt "$LIMIT" ] || [ $((carried + part + tree)) -gt $((60 * 1024 * 1024)) ]; then
  echo "gpu_wheels: too big for one device call (64 MiB with the tree)" >&2
  exit 1
fi
cat <<'RUN'
Device tool calls, one right after the other (the machine stays warm about 30 s between):
  run(command="bash scripts/gpu_check.sh --stage", carry=[".whl", ".gguf_parts/part0"], timeout_s=120)
  run(command="bash scripts/gpu_check.sh --stage", carry=[".gguf_parts/part1"], timeout_s=120)
  run(command="bash scripts/gpu_check.sh", carry=[".gguf_parts/part2"], timeout_s=480)
Without the model (the random one only): run(command="bash scripts/gpu_check.sh",
carry=[".whl"], timeout_s=480). The JSON comes back as $OUT/gpu_check.json with the log
beside it; then give_back.
RUN
