"""Benchmark scripts are not a package: `bench` loads the one a test module names in its
`BENCHMARK` (a file in benchmarks/) so its pure parts can be tested."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench(request):
    name = request.module.BENCHMARK
    sys.path.insert(0, str(BENCH))  # benchmarks import benchmarks/_machine.py
    spec = importlib.util.spec_from_file_location(f"benchmarks_{Path(name).stem}", BENCH / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(BENCH))
