"""Fixtures for the Kubernetes driver's tests: an in-process fake API server and a driver on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_apiserver import NAMESPACE, FakeApiServer

from asyncdeploy.drivers.kubernetes import KubernetesDriver


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(namespaces=("default", NAMESPACE)) as server:
        yield server


@pytest.fixture
def kubeconfig(fake: FakeApiServer, tmp_path: Path) -> Path:
    return fake.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)


@pytest.fixture
async def driver(kubeconfig: Path) -> AsyncIterator[KubernetesDriver]:
    opened = await KubernetesDriver.connect(kubeconfig=str(kubeconfig), request_timeout=5)
    opened.watch_margin = 2.0  # a stuck Pod is reported 2 s after its grace, not 15
    try:
        yield opened
    finally:
        await opened.aclose()
