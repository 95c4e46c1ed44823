"""Shared test settings: the anyio plugin on asyncio (aiohttp, under both SDKs, is asyncio-only),
and the markers that say what a test needs, set from where the test lives."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
NEEDS: dict[str, tuple[str, ...]] = {
    "engines": ("engine",),  # real Docker and Podman (the params add docker / podman)
    "kubernetes/test_real_cluster.py": ("cluster",),
    "kubernetes/test_real_cluster_drain.py": ("cluster",),
    "kubernetes/test_real_cluster_replace.py": ("cluster",),
    "kubernetes/test_real_cluster_namespaces.py": ("cluster",),
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
            if where == prefix or where.startswith(prefix + "/"):
                for marker in markers:
                    item.add_marker(marker)
