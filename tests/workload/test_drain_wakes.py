"""The drain ends when its window closes: whatever waits for "drained" wakes within a second of
the window closing, not at the window's maximum (issue 23 item 2: the probe that moved the
window's end forward never woke the waiter, and every drain spent its maximum, 10 s)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest

from asyncdeploy.workload import (
    BalancerCheck,
    DrainController,
    DrainMiddleware,
    PropagationWindow,
    TerminationRequest,
)
from asyncdeploy.workload.demo import DemoApp
from asyncdeploy.workload.runner import ServeOptions, serve_with_drain

pytestmark = pytest.mark.anyio

# A window whose maximum (10 s, the default) is far from the early close the test causes: a
# balancer checking every 0.1 s, out after one failure, has certainly stopped 1.1 s in.
WINDOW = PropagationWindow(
    max_seconds=10.0, quiet_seconds=0.2, balancer=BalancerCheck(interval=0.1, fall=1)
)


async def test_wait_drained_wakes_when_the_window_closes_early() -> None:
    """A waiter that started before the evidence came wakes as the window closes."""
    controller = DrainController(propagation=WINDOW)
    controller.mark_started()
    drain_at = time.monotonic()
    controller.begin_drain()
    returned: list[float] = []

    async def wait() -> None:
        assert await controller.wait_drained()
        returned.append(time.monotonic())

    with anyio.fail_after(6):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.1)  # the waiter sleeps towards the window's maximum
            assert controller.check_ready() is False  # the balancer's probe sees the drain
    stats = controller.statistics()
    assert stats.window_close_reason == "balancer-check"
    assert stats.window_closed_after is not None and stats.window_closed_after < 2
    returned_after = returned[0] - drain_at
    assert returned_after - stats.window_closed_after < 1.0, (returned_after, stats)


async def test_serve_with_drain_returns_within_a_second_of_the_window_closing() -> None:
    """Over TCP: termination, a balancer's probe fails, the window closes early; the server
    exits about then (it waited the window's maximum)."""
    controller = DrainController(drain_timeout=20, propagation=WINDOW)
    termination = TerminationRequest(controller)
    app = DrainMiddleware(DemoApp(), controller)
    options = ServeOptions(port=0, log_level="warning", shutdown_timeout=1)
    result: dict[str, Any] = {}

    async def serve(*, task_status: Any) -> None:
        result["stats"] = await serve_with_drain(
            app, controller, options, termination=termination, task_status=task_status
        )
        result["returned"] = time.monotonic()

    with anyio.fail_after(8):
        async with anyio.create_task_group() as tg:
            address = await tg.start(serve)
            controller.mark_started()
            base = f"http://127.0.0.1:{address.port}"
            async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=5) as client:
                assert (await client.get("/short")).status_code == 200
                started = time.monotonic()
                termination.request("test")
                assert (await client.get("/ready")).status_code == 503
    stats = result["stats"]
    assert stats.window_close_reason == "balancer-check", stats
    assert stats.window_closed_after is not None and stats.window_closed_after < 3, stats
    returned_after = result["returned"] - started
    assert returned_after - stats.window_closed_after < 1.0, (returned_after, stats)


async def test_wait_drained_wakes_when_told_that_traffic_left() -> None:
    """The deployer's word (Kubernetes' TrafficLeft) during the drain wakes the waiter too."""
    window = PropagationWindow(max_seconds=10.0, quiet_seconds=0.2, endpoints_margin=0.3)
    controller = DrainController(propagation=window)
    controller.mark_started()
    drain_at = time.monotonic()
    controller.begin_drain()
    with anyio.fail_after(6):
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.wait_drained)
            await anyio.sleep(0.1)
            controller.note_traffic_left()
        returned_after = time.monotonic() - drain_at
    stats = controller.statistics()
    assert stats.window_close_reason == "traffic-left", stats
    assert stats.window_closed_after is not None
    assert returned_after - stats.window_closed_after < 1.0, (returned_after, stats)
