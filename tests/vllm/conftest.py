"""The vLLM engine's tests run in the vLLM venv (scripts/vllm_venv.sh), where `vllm` imports;
tests/engine/test_vllm_venv.py runs them there from the main suite. Elsewhere they are not
collected."""

import importlib.util

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]
