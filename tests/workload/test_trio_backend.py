"""The server kit runs on trio too (the README says so; the deployer is the asyncio-only half)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from asyncdeploy.workload import DrainController, DrainMiddleware

pytest.importorskip("trio")
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def test_a_drain_under_trio_finishes_the_stream_and_refuses_newcomers(
    controller: DrainController, demo: DrainMiddleware, exchange: Any, sse: Any
) -> None:
    from trio.lowlevel import current_root_task

    assert current_root_task() is not None, "this runs under trio"
    stream = exchange(demo, "/stream?tokens=4&pace=0.02")
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.run)
        with anyio.fail_after(5):
            await stream.wait_chunks(2)
        controller.begin_drain(timeout=5)
        late = await exchange(demo, "/short").run()
        assert late.status == 503
    assert [name for name, _ in sse(stream.body)] == ["token"] * 4 + ["done"]
    with anyio.fail_after(5):
        assert await controller.wait_drained()
    assert controller.statistics().completed == 1
