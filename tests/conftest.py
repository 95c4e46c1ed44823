"""Shared test settings: the anyio plugin on asyncio (aiohttp, under both SDKs, is asyncio-only)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
