from __future__ import annotations

from pathlib import Path

import pytest

from practicum.envs.sandbox import available_backends

BACKENDS = available_backends()


@pytest.fixture(params=["bwrap", "namespaces"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param not in BACKENDS:
        pytest.skip(f"sandbox backend {request.param} is not usable on this machine")
    return request.param


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d
