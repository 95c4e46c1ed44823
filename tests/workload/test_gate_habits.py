"""Every client habit passes through the gate: HEAD, WebSockets, pipelining in the drain's
window, a connection cap that keeps serving what it holds.

Before: HEAD on the gate's own paths was answered with a body (h11 then read the next answer
as garbage; aiohttp's ``HEAD /ready`` failed); a WebSocket got ``101`` and then silence, counted
completed; three pipelined GETs inside the window got one answer. On asyncio and uvloop."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import AsyncIterator

import aiohttp
import anyio
import h11
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.gate._limits import Limits
from asyncdeploy.workload import DrainController, DrainState, PropagationWindow
from tests.polling import until
from tests.workload.test_gate_proxy import (
    Gate,
    anyio_backend,
    engine,
    load_seconds,
    raw_exchange,
    until_ready,
)

__all__ = ["anyio_backend", "engine", "load_seconds"]  # fixtures shared with the gate's proxy tests

pytestmark = pytest.mark.anyio


@pytest.fixture
def window() -> float:
    return 0.5


@pytest.fixture
def max_connections() -> int:
    return 100


@pytest.fixture
async def gate(
    engine: subprocess.Popen[bytes], window: float, max_connections: int
) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=30, propagation=PropagationWindow(max_seconds=window, quiet_seconds=window)
    )
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=engine.port,  # type: ignore[attr-defined]
        check_interval=0.1,
        limits=Limits(max_connections=max_connections),
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        yield Gate(port, 0, controller)
        tg.cancel_scope.cancel()


def h11_exchanges(raw: bytes, methods: list[bytes]) -> list[tuple[int, bytes]]:
    """The answers h11 reads from ``raw``, for requests of ``methods`` in order."""
    client = h11.Connection(h11.CLIENT)
    client.receive_data(raw)
    out: list[tuple[int, bytes]] = []
    for method in methods:
        if out:
            client.start_next_cycle()
        client.send(h11.Request(method=method, target="/", headers=[("host", "g")]))
        client.send(h11.EndOfMessage())
        status, body = 0, b""
        while True:
            event = client.next_event()
            assert event is not h11.NEED_DATA, (method, out)
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        out.append((status, body))
    return out


async def test_head_is_answered_without_a_body_everywhere_through_h11(gate: Gate) -> None:
    """HEAD then GET on one connection, for each of the gate's own paths and a relayed one:
    h11 reads the HEAD's answer without a body and the GET's whole."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    for path in (b"/ready", b"/live", b"/startup", b"/-/metrics", b"/short"):
        request = (
            b"HEAD %s HTTP/1.1\r\nHost: g\r\n\r\n"
            b"GET %s HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
        )
        raw = await raw_exchange(gate, request % (path, path))
        (head_status, head_body), (get_status, get_body) = h11_exchanges(raw, [b"HEAD", b"GET"])
        assert (head_status, head_body) == (200, b""), path
        assert get_status == 200 and get_body, path


async def test_head_through_aiohttp(gate: Gate) -> None:
    """An aiohttp health check (HEAD /ready) passes, and its session goes on working."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    async with aiohttp.ClientSession() as session:
        for path in ("/ready", "/live", "/-/metrics", "/short"):
            async with session.head(f"{gate.url}{path}") as response:
                assert response.status == 200, path
                assert await response.read() == b""
        async with session.get(f"{gate.url}/ready") as response:
            assert (await response.json())["ok"] is True


async def test_three_pipelined_requests_inside_the_window_are_all_answered(
    gate: Gate,
) -> None:
    """While the drain's window is open the first of three pipelined requests is served with
    Connection: close and the connection closes behind it: the other two were never relayed
    (HAProxy drops what follows a closing answer; RFC 9112 section 9.3.2: the client retries
    unanswered pipelined requests, on a new connection that the balancer sends elsewhere).
    Once the window closed, each is refused with 503."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    gate.controller.begin_drain(propagation=5)
    await anyio.sleep(0.2)  # the controller tells HAProxy (its next tick)
    admitted = gate.controller.statistics().admitted
    three = b"GET /short HTTP/1.1\r\nHost: g\r\n\r\n" * 3
    inside = await raw_exchange(gate, three)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", inside) == [b"200"]
    assert inside.count(b'{"ok":true}') == 1
    assert inside.lower().count(b"connection: close") == 1
    await until(lambda: gate.controller.statistics().completed == admitted + 1, timeout=5)
    await anyio.sleep(0.2)  # more reads of HAProxy's counters: nothing else was relayed
    assert gate.controller.statistics().admitted == admitted + 1
    assert gate.controller.in_flight == 0
    gate.controller.begin_drain(propagation=0)  # the window closes
    await until(lambda: gate.controller.try_admit() is None, timeout=5)
    await anyio.sleep(0.2)  # the controller has told HAProxy
    after = await raw_exchange(gate, three)
    # refused with 503 and closed: the other two were neither relayed nor answered
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", after) == [b"503"]
    assert gate.controller.state is DrainState.DRAINING


async def test_an_upgrade_the_engine_refuses_leaves_the_connection_http(gate: Gate) -> None:
    """An Upgrade request answered without 101 (the stock engine knows no WebSocket): what the
    client sent after it is read as the next request, and answered."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    upgrade = (
        b"GET /short HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    last = b"GET /short HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
    answers = await raw_exchange(gate, upgrade + last)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answers) == [b"200", b"200"]
    assert answers.count(b'{"ok":true}') == 2
    await until(lambda: gate.controller.in_flight == 0, timeout=5)  # one read behind HAProxy


@pytest.mark.parametrize("max_connections", [3])
async def test_past_the_cap_a_newcomer_gets_503_and_those_held_are_served(gate: Gate) -> None:
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    port = int(gate.url.rsplit(":", 1)[1])
    request = b"GET /short HTTP/1.1\r\nHost: g\r\n\r\n"
    held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(3)]
    try:
        for stream in held:
            await stream.send(request)
            assert (await stream.receive()).startswith(b"HTTP/1.1 200 ")
        refused = await raw_exchange(gate, request)
        assert refused.startswith(b"HTTP/1.1 503 ") and b"connection: close" in refused
        for stream in held:  # those held are served on
            await stream.send(request)
            assert (await stream.receive()).startswith(b"HTTP/1.1 200 ")
    finally:
        for stream in held:
            await stream.aclose()
    async with httpx.AsyncClient() as client:  # their slots are free again
        await until(lambda: status_ok(client, f"{gate.url}/short"), timeout=5)


async def status_ok(client: httpx.AsyncClient, url: str) -> bool:
    return (await client.get(url)).status_code == 200


@pytest.fixture
async def websocket_gate() -> AsyncIterator[tuple[str, DrainController]]:
    """The gate in front of a WebSocket echo server (the ``websockets`` library)."""

    async def echo(connection: ServerConnection) -> None:
        async for message in connection:
            await connection.send(message)

    async with serve(echo, "127.0.0.1", 0) as server:
        upstream = server.sockets[0].getsockname()[1]
        controller = DrainController(
            drain_timeout=1.0, propagation=PropagationWindow(max_seconds=0)
        )
        config = GateConfig(
            listen_port=0,
            listen_host="127.0.0.1",
            upstream_port=upstream,
            ready_path=None,
            check_interval=0.05,
        )
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_gate, config, controller)
            await until(lambda: controller.state is DrainState.SERVING, timeout=10)
            yield f"ws://127.0.0.1:{port}/ws", controller
            tg.cancel_scope.cancel()


async def test_a_websocket_is_tunnelled_both_ways_and_counted_until_it_closes(
    websocket_gate: tuple[str, DrainController],
) -> None:
    url, controller = websocket_gate
    async with connect(url) as websocket:
        for message in ("hello", "x" * 200_000, "bye"):
            await websocket.send(message)
            with anyio.fail_after(5):
                assert await websocket.recv() == message
        await anyio.sleep(0.3)  # several reads of HAProxy's counters: still one, still open
        assert controller.in_flight == 1
    await until(lambda: controller.in_flight == 0, timeout=5)
    statistics = controller.statistics()
    assert (statistics.admitted, statistics.failed) == (1, 0)


async def test_a_websocket_open_at_the_drain_deadline_is_closed_visibly(
    websocket_gate: tuple[str, DrainController],
) -> None:
    url, controller = websocket_gate
    async with connect(url) as websocket:
        await websocket.send("before")
        assert await websocket.recv() == "before"
        await until(lambda: controller.in_flight == 1, timeout=5)
        controller.begin_drain()  # deadline 1 s
        with anyio.fail_after(5), pytest.raises(ConnectionClosed):
            await read_until_closed(websocket)
    assert controller.statistics().cut_at_deadline == 1
    assert controller.in_flight == 0


async def read_until_closed(websocket: ClientConnection) -> None:
    while True:
        await websocket.recv()


async def test_an_h2c_client_is_served_and_its_stream_counted_to_its_end(gate: Gate) -> None:
    """A client speaking HTTP/2 without TLS (prior knowledge, as gRPC's and curl's h2c do):
    HAProxy detects the preface on the data port, the engine gets HTTP/1.1, the stream is
    counted in flight until it ends. (Before issue 30 the gate spoke HTTP/1.1 only.)"""
    curl = shutil.which("curl")
    if curl is None or b"HTTP2" not in (await anyio.run_process([curl, "-V"])).stdout:
        pytest.skip("curl with HTTP/2")
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    command = [curl, "-sN", "--http2-prior-knowledge", "-w", "\n%{http_version}",
               f"{gate.url}/stream?tokens=20&ms=50"]  # fmt: skip
    async with await anyio.open_process(command) as process, anyio.create_task_group() as tg:
        output: list[bytes] = []

        async def read() -> None:
            assert process.stdout is not None
            async for chunk in process.stdout:
                output.append(chunk)

        tg.start_soon(read)
        await until(lambda: gate.controller.in_flight == 1, timeout=5)
        await process.wait()
    text = b"".join(output).decode()
    assert text.count("data: ") == 21 and text.rstrip().endswith("\n2")
    await until(lambda: gate.controller.in_flight == 0, timeout=5)
