"""The deployer needs asyncio: under trio it says so instead of aiohttp's "no running event loop"."""

from __future__ import annotations

import anyio
import pytest

from asyncdeploy import UnsupportedEventLoop, open_deployer

pytest.importorskip("trio")


@pytest.mark.parametrize("driver", ["docker", "kubernetes", None])
def test_open_deployer_under_trio_names_the_problem(driver: str | None) -> None:
    """Before any engine is contacted, for every driver and for auto-detection."""

    async def main() -> None:
        async with open_deployer(driver):  # type: ignore[call-overload]
            pass

    with pytest.raises(UnsupportedEventLoop, match=r"needs asyncio, but it runs under trio"):
        anyio.run(main, backend="trio")
