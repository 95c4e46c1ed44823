"""WebSockets are in flight while open: a drain waits for them, the deadline closes them 1012.

A real uvicorn (serve_with_drain) and a real client (the ``websockets`` package).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import websockets
from websockets.asyncio.client import connect

from asyncdeploy.workload import (
    DrainController,
    DrainMiddleware,
    DrainState,
    PropagationWindow,
    TerminationRequest,
)
from asyncdeploy.workload.runner import ServeOptions, serve_with_drain

pytestmark = pytest.mark.anyio


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """An echo WebSocket app that knows nothing of the kit."""
    if scope["type"] != "websocket":
        return
    message = await receive()
    assert message["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": message.get("text") or ""})


def _serving(drain_timeout: float | None) -> DrainController:
    controller = DrainController(
        drain_timeout=drain_timeout, propagation=PropagationWindow.refuse_at_once()
    )
    controller.mark_started()
    return controller


async def _serve(controller: DrainController, result: dict[str, Any], *, task_status: Any) -> None:
    termination = result["termination"] = TerminationRequest(controller)
    options = ServeOptions(port=0, log_level="warning")
    result["stats"] = await serve_with_drain(
        DrainMiddleware(echo, controller),
        controller,
        options,
        termination=termination,
        task_status=task_status,
    )


async def test_an_open_websocket_is_in_flight_and_keeps_the_drain_open() -> None:
    """Open socket: in flight 1; the drain waits for it and it keeps working; closed by the
    client, the drain ends with it counted completed (main: admitted 0, drained at once)."""
    controller = _serving(drain_timeout=30)
    result: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        address = await tg.start(_serve, controller, result)
        async with connect(f"ws://127.0.0.1:{address.port}/ws") as ws:
            await ws.send("one")
            assert await ws.recv() == "one"
            assert controller.in_flight == 1
            result["termination"].request("test")
            assert not await controller.wait_drained(0.5)  # the socket holds the drain
            await ws.send("two")  # and still works, well past the signal
            assert await ws.recv() == "two"
            assert controller.state is DrainState.DRAINING
        with anyio.fail_after(10):
            assert await controller.wait_drained()
    stats = result["stats"]
    assert (stats.admitted, stats.completed, stats.in_flight) == (1, 1, 0)


async def test_the_deadline_closes_an_open_websocket_with_1012() -> None:
    """At the drain deadline the socket is closed 1012 (service restart) and counted cut."""
    controller = _serving(drain_timeout=0.5)
    result: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        address = await tg.start(_serve, controller, result)
        async with connect(f"ws://127.0.0.1:{address.port}/ws") as ws:
            await ws.send("one")
            assert await ws.recv() == "one"
            result["termination"].request("test")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                with anyio.fail_after(10):
                    await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
    assert result["stats"].cut_at_deadline == 1


async def test_a_websocket_is_refused_while_draining() -> None:
    """After the window: no upgrade; the handshake is answered 503 with Retry-After."""
    controller = _serving(drain_timeout=30)
    result: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        address = await tg.start(_serve, controller, result)
        controller.begin_drain()
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(f"ws://127.0.0.1:{address.port}/ws")
        result["termination"].request("test")
    assert refused.value.response.status_code == 503
    assert refused.value.response.headers["Retry-After"] == "5"
    assert result["stats"].rejected_while_draining == 1
