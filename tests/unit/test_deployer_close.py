"""A deployer closed from a cancelled task still closes its engine client. Unshielded, the
close gave up at its first await and left the client's aiohttp session open (aiohttp's
"Unclosed client session" at the loop's end): a control plane that closes its deployer in its
own ``finally`` after a cancellation did just that."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from asyncdeploy.deployer import Deployer
from asyncdeploy.testing import FakeDriver

pytestmark = pytest.mark.anyio


class ClosingDriver(FakeDriver):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()  # a real client's close awaits its connector first
        self.closed = True


async def test_a_cancelled_caller_still_closes_the_engine_client() -> None:
    driver = ClosingDriver()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await Deployer(driver).aclose()
    assert driver.closed


async def test_a_close_that_hangs_gives_up_at_its_bound() -> None:
    class HangingDriver(FakeDriver):
        async def aclose(self) -> None:
            await anyio.sleep_forever()

    with anyio.fail_after(60):  # virtual time: the bound (10 s) passes at once
        await Deployer(HangingDriver()).aclose()
