"""Shared test settings: the anyio plugin on asyncio (aiohttp, under both SDKs, is asyncio-only),
the markers that say what a test needs, set from where the test lives, and hypothesis' profile."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests check what holds, not how fast: speed is measured in the benchmark, and a
# loaded machine must not fail an example for taking 287 ms against hypothesis' 200 ms.
settings.register_profile(
    "asyncdeploy", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("asyncdeploy")

TESTS = Path(__file__).resolve().parent
NEEDS: dict[str, tuple[str, ...]] = {
    "engines": ("engine",),  # real Docker and Podman (the params add docker / podman)
    "kubernetes/test_real_cluster*": ("cluster",),  # every real-cluster file
    "install": ("slow",),  # builds a fresh venv
    "unit/test_typing.py": ("slow",),  # runs mypy over the package, twice
}


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.resolve().relative_to(TESTS).as_posix()
        for prefix, markers in NEEDS.items():
            if fnmatch(where, prefix) or where.startswith(prefix + "/"):
                for marker in markers:
                    item.add_marker(marker)
