"""A cut response is visibly cut, and work the app still does is still in flight."""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any

import anyio
import httpx
import pytest

from asyncdeploy.workload import (
    DrainController,
    DrainMiddleware,
    PropagationWindow,
    TerminationRequest,
)
from asyncdeploy.workload.runner import ServeOptions, serve_with_drain

pytestmark = pytest.mark.anyio


def _controller(drain_timeout: float | None) -> DrainController:
    controller = DrainController(
        drain_timeout=drain_timeout, propagation=PropagationWindow.refuse_at_once()
    )
    controller.mark_started()
    return controller


async def lines_app(scope: Any, receive: Any, send: Any) -> None:
    """A plain (not SSE) streamed body: 100 lines, one every 50 ms."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for index in range(100):
        await send({"type": "http.response.body", "body": b"line %d\n" % index, "more_body": True})
        await anyio.sleep(0.05)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def test_a_cut_plain_stream_gets_no_final_frame(exchange: Any) -> None:
    """In-process: the cut body is never ended with a last frame (main ended it cleanly)."""
    controller = _controller(drain_timeout=0.2)
    lines = exchange(DrainMiddleware(lines_app, controller), "/lines")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.run)
        with anyio.fail_after(2):
            await lines.wait_chunks(2)
        controller.begin_drain()
        with anyio.fail_after(3):
            assert await controller.wait_drained()
    assert lines.status == 200
    assert not lines.complete  # no more_body=False: the server cannot end it as complete
    assert 0 < lines.body.count(b"\n") < 100
    assert controller.statistics().cut_at_deadline == 1


async def test_a_cut_plain_stream_is_a_broken_body_on_the_wire() -> None:
    """Over TCP through uvicorn: the client's read fails, it never sees a complete body."""
    controller = _controller(drain_timeout=0.3)
    options = ServeOptions(port=0, log_level="critical")
    app = DrainMiddleware(lines_app, controller)
    received = bytearray()

    async def read(client: httpx.AsyncClient, url: str) -> None:
        async with client.stream("GET", url) as response:
            async for chunk in response.aiter_bytes():
                received.extend(chunk)
                controller.begin_drain()  # idempotent: the first chunk starts it

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve_with_drain, app, controller, options)
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            url = f"http://127.0.0.1:{address.port}/lines"
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                await read(client, url)
        tg.cancel_scope.cancel()
    assert 0 < received.count(b"\n") < 100


async def test_without_cancel_on_disconnect_the_app_stays_in_flight(exchange: Any) -> None:
    """The client left, the app goes on: it is in flight until it returns (main: released)."""
    controller = _controller(drain_timeout=None)
    finished = anyio.Event()

    async def stubborn(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await anyio.sleep(0.5)  # e.g. a generation that must finish for a cache
        await send({"type": "http.response.body", "body": b"y", "more_body": False})
        finished.set()

    request = exchange(DrainMiddleware(stubborn, controller, cancel_on_disconnect=False), "/x")
    async with anyio.create_task_group() as tg:
        tg.start_soon(request.run)
        with anyio.fail_after(2):
            await request.wait_chunks(1)
        request.disconnect()
        await anyio.sleep(0.1)
        assert controller.in_flight == 1  # the app still works
        controller.begin_drain()
        assert not await controller.wait_drained(0.1)
        with anyio.fail_after(3):
            assert await controller.wait_drained()
        assert finished.is_set()  # drained only once the app had returned
    stats = controller.statistics()
    assert (stats.client_disconnected, stats.in_flight) == (1, 0)


async def test_serve_with_drain_does_not_exit_under_a_working_app() -> None:
    """cancel_on_disconnect=False over TCP: the server waits for the app the client left."""
    controller = _controller(drain_timeout=10)
    termination = TerminationRequest(controller)
    finished = anyio.Event()
    started = anyio.Event()

    async def stubborn(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        started.set()
        await anyio.sleep(2.0)  # goes on after its client left, past uvicorn's own 1 s
        finished.set()

    app = DrainMiddleware(stubborn, controller, cancel_on_disconnect=False)
    options = ServeOptions(port=0, log_level="critical", shutdown_timeout=1)
    result: dict[str, Any] = {}

    async def serve(*, task_status: Any) -> None:
        result["stats"] = await serve_with_drain(
            app, controller, options, termination=termination, task_status=task_status
        )
        result["finished_first"] = finished.is_set()

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve)
        with socket.create_connection(("127.0.0.1", address.port)) as client:
            client.sendall(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
            with anyio.fail_after(5):
                await started.wait()
        await anyio.sleep(0.1)  # the client is gone, the app still works
        termination.request("test")
    assert result["finished_first"]  # serve_with_drain returned only after the app did
    assert result["stats"].client_disconnected == 1


async def test_a_slow_readers_cut_is_accounted_before_the_server_exits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that stops reading: the cut frame cannot be written within its timeout; the
    server waits for that attempt instead of exiting with the stream still in flight, and the
    stream ends unfinished (no final chunk)."""
    controller = _controller(drain_timeout=0.3)
    termination = TerminationRequest(controller)

    async def flood(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        frame = b"data: " + b"x" * 65536 + b"\n\n"
        while True:
            await send({"type": "http.response.body", "body": frame, "more_body": True})

    app = DrainMiddleware(flood, controller, cut_send_timeout=1.0)
    options = ServeOptions(port=0, log_level="critical", cut_grace=0.5)
    caplog.set_level(logging.INFO, logger="asyncdeploy.workload")
    client = socket.socket()
    try:
        async with anyio.create_task_group() as tg:
            address = await tg.start(
                functools.partial(serve_with_drain, termination=termination),
                app,
                controller,
                options,
            )
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", address.port))
            client.sendall(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
            await anyio.sleep(0.5)  # the buffers fill up; the client reads nothing
            termination.request("test")
        body, closed = _read_all(client)
    finally:
        client.close()
    assert "still in flight" not in caplog.text
    assert "cut frame not written" in caplog.text
    stats = controller.statistics()
    assert (stats.cut_at_deadline, stats.in_flight) == (1, 0)
    assert not body.endswith(b"0\r\n\r\n")  # the chunked body was never ended
    assert closed  # the server left its connection closed, not open until its process ends


def _read_all(client: socket.socket) -> tuple[bytes, bool]:
    """What the server sent, and whether it closed (or reset) the connection behind it."""
    client.settimeout(5)
    data = b""
    try:
        while chunk := client.recv(1 << 20):
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        pass
    return data, True
