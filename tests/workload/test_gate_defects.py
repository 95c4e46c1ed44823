"""The defects a hostile review proved in the hand-written relay (issue 30), each refused by
the gate on HAProxy: run as a client on loopback against the whole gate (controller and
HAProxy) in front of the stock engine, with a 1 s head timeout and a 2 s idle timeout.

Each of these failed on the relay: the engine saw a smuggled request the gate never counted;
100 idle connections without the token locked the drain hook out (503); a stalled body or an
answer never read held the engine for good; a connection that stopped reading was never
closed; an 8 MiB header field was neither refused nor linear; an ``Upgrade`` request's body
was never relayed; a ``101`` to a request that asked for no upgrade was tunnelled."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.gate._limits import Limits
from asyncdeploy.workload import DrainController, PropagationWindow
from tests.polling import until
from tests.workload.test_gate_proxy import Gate, engine, free_port, load_seconds, until_ready

__all__ = ["engine", "load_seconds"]

pytestmark = pytest.mark.anyio
TOKEN = "defects-token"
IDLE = 1.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream_port(engine) -> int:  # type: ignore[no-untyped-def]
    return int(engine.port)


@pytest.fixture
async def gate(upstream_port: int) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=30, propagation=PropagationWindow(max_seconds=0.5, quiet_seconds=0.2)
    )
    admin_port = free_port()
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=upstream_port,
        check_interval=0.1,
        limits=Limits(header_timeout=1.0, idle_timeout=IDLE),
        admin_port=admin_port,
        admin_host="127.0.0.1",
        admin_token=TOKEN,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        gate = Gate(port, admin_port, controller)
        async with httpx.AsyncClient() as client:
            await until_ready(client, gate)
        yield gate
        tg.cancel_scope.cancel()


def port_of(gate: Gate) -> int:
    return int(gate.url.rsplit(":", 1)[1])


async def engine_count(gate: Gate, name: str = "engine_requests_total") -> int:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{gate.url}/metrics")).text
    return int(text.split(f"{name} ")[1].split()[0])


async def engine_requests(gate: Gate) -> int:
    """Requests the engine took, its health checks aside (HAProxy: one connection each)."""
    return await engine_count(gate, "engine_connections_total")


async def exchange(port: int, data: bytes, seconds: float = 10) -> bytes:
    """Send ``data``; what came back until the gate closed (fails after ``seconds``)."""
    received = b""
    with anyio.fail_after(seconds):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(data)
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return received


async def test_a_duplicate_transfer_encoding_never_smuggles(gate: Gate) -> None:
    """``Transfer-Encoding: identity`` then ``chunked``, with a second request hidden behind an
    empty chunked body: refused, or framed one way for the engine and for the count alike
    (every request the engine saw was one the gate admitted)."""
    smuggling = (
        b"POST /echo HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: identity\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        b"POST /smuggled HTTP/1.1\r\nHost: g\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    # the admitted count before any request of ours: the controller reads HAProxy's counters
    # every 50 ms, so a count taken after our first /metrics call may not hold it yet
    before_admitted = gate.controller.statistics().admitted
    before_engine = await engine_requests(gate)
    await until(lambda: gate.controller.in_flight == 0, timeout=5)
    answer = await exchange(port_of(gate), smuggling)
    # HAProxy refuses it (422: a transfer coding it does not know); framed one way otherwise
    assert answer.startswith((b"HTTP/1.1 4", b"HTTP/1.1 200 ", b"HTTP/1.1 501 ")), answer[:80]
    seen = await engine_requests(gate) - before_engine - 1  # less our own second /metrics
    # admitted: what the engine saw of the attack, and our two /metrics calls
    await until(lambda: gate.controller.statistics().admitted - before_admitted == seen + 2,
                timeout=5)  # fmt: skip
    await until(lambda: gate.controller.in_flight == 0, timeout=5)  # one read behind HAProxy


async def test_the_drain_hook_is_answered_while_100_connections_without_the_token_are_held(
    gate: Gate,
) -> None:
    idle = [await anyio.connect_tcp("127.0.0.1", gate.admin_port) for _ in range(100)]
    try:
        async with httpx.AsyncClient() as client:
            with anyio.fail_after(5):
                status = await client.get(
                    f"{gate.admin_url}/-/status", headers={"x-asyncdeploy-token": TOKEN}
                )
            assert status.status_code == 200
            with anyio.fail_after(10):
                drain = await client.get(
                    f"{gate.admin_url}/-/drain?propagation_wait=0s&timeout=5s&token={TOKEN}"
                )
            assert drain.status_code == 200 and drain.json()["drained"] is True
    finally:
        for stream in idle:
            await stream.aclose()


async def test_a_stalled_body_is_a_408_at_the_head_timeout_and_never_reaches_the_engine(
    gate: Gate,
) -> None:
    """A POST head and 10 of its 1,000 body bytes, then silence: 408 at the head timeout (the
    body is waited for before the engine is reached); the engine never saw it."""
    stalled = b"POST /echo HTTP/1.1\r\nHost: g\r\nContent-Length: 1000\r\n\r\n0123456789"
    before = await engine_requests(gate)
    started = time.monotonic()
    answer = await exchange(port_of(gate), stalled, seconds=IDLE + 10)
    assert time.monotonic() - started >= 0.9  # the 1 s head timeout
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert await engine_requests(gate) == before + 1  # our own /metrics alone
    # nothing held: the count follows HAProxy's one read behind (our /metrics just ended)
    await until(lambda: gate.controller.in_flight == 0, timeout=5)


async def test_an_answer_never_read_is_closed_at_the_idle_timeout(gate: Gate) -> None:
    """A long, fast stream the client never reads: the connection is closed once its buffers
    are full and nothing moved for the idle timeout; the engine is freed."""
    port = port_of(gate)
    with anyio.fail_after(IDLE + 15):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /stream?tokens=1000000&ms=0 HTTP/1.1\r\nHost: g\r\n\r\n")
            await until(lambda: gate.controller.in_flight == 1, timeout=5)
            await until(lambda: gate.controller.in_flight == 0, timeout=IDLE + 10)
    assert gate.controller.statistics().in_flight == 0


async def test_a_stream_with_bytes_flowing_is_never_cut_by_the_idle_timeout(gate: Gate) -> None:
    """A stream three times longer than the idle timeout, a token every 100 ms: whole."""
    async with httpx.AsyncClient(timeout=30) as client:
        url = f"{gate.url}/stream?tokens=30&ms=100"
        async with client.stream("GET", url) as response:
            lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    assert len(lines) == 31 and lines[-1] == "data: [DONE]"


async def test_a_connection_that_stops_reading_is_closed(gate: Gate) -> None:
    flood = b"GET /-/metrics HTTP/1.1\r\nHost: g\r\n\r\n" * 1500
    with anyio.fail_after(IDLE + 15):
        async with await anyio.connect_tcp("127.0.0.1", port_of(gate)) as stream:
            with anyio.move_on_after(2):
                await stream.send(flood)
            await anyio.sleep(IDLE + 2)  # not reading: the gate closes it
            closed = False
            try:
                while True:  # what the gate sent before it closed, then its end
                    await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                closed = True
            assert closed
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{gate.url}/ready")).status_code == 200


@pytest.mark.parametrize("size", [64 * 1024, 8 * 1024 * 1024])
async def test_an_oversized_header_field_is_refused_at_once(gate: Gate, size: int) -> None:
    """One header field past the head limit: HAProxy answers 400 and closes once its buffer
    is full, without taking the rest; meanwhile /ready on another connection is answered at
    once. (The 400 may be lost to the reset of a connection closed with the client's bytes
    unread: then the connection closed is the answer.)"""
    port = port_of(gate)
    received = b""
    sent = 0
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"GET /short HTTP/1.1\r\nHost: g\r\nX-Big: ")
        with anyio.move_on_after(5):
            try:
                for _ in range(size // 65536):
                    await stream.send(b"a" * 65536)
                    sent += 65536
            except (anyio.BrokenResourceError, OSError):
                pass
        with anyio.fail_after(10):  # a hang's bound, not a speed's
            async with httpx.AsyncClient() as client:
                # answered while the oversized head's connection is held, unread: not behind it
                assert (await client.get(f"{gate.url}/ready")).status_code == 200
        with anyio.fail_after(5):
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass
    if size <= 64 * 1024:
        assert received.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 ")), received[:60]
    else:  # it stopped taking bytes long before the 8 MiB (kernel buffers aside)
        assert received.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 ")) or sent < size // 2


async def test_an_upgrade_request_with_a_body_has_its_body_relayed(gate: Gate) -> None:
    """``curl --http2 -d @20KB``: ``Upgrade: h2c`` on a POST; the engine does not upgrade, so
    the body goes through and the POST is answered as HTTP/1.1."""
    body = b"x" * 20_000
    request = (
        b"POST /echo HTTP/1.1\r\nHost: g\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
        b"Content-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n%s"
    ) % (len(body), body)
    received = b""
    with anyio.fail_after(10):
        async with await anyio.connect_tcp("127.0.0.1", port_of(gate)) as stream:
            await stream.send(request)
            while b'"length": 20000' not in received:
                received += await stream.receive()
    assert received.startswith(b"HTTP/1.1 200 ")
    await until(lambda: gate.controller.in_flight == 0, timeout=5)


@pytest.fixture
def always_101() -> Iterator[int]:
    """An engine that answers every request but its health check with ``101``."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed at teardown
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    data = conn.recv(65536)
                    if not data:
                        break
                    head += data
                if head.startswith(b"GET /health "):
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
                    )
                else:
                    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                                 b"Upgrade: websocket\r\n\r\nraw bytes of another protocol")  # fmt: skip
                    time.sleep(0.5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.close()
        thread.join(5)


async def test_a_101_to_a_request_that_asked_for_no_upgrade_is_a_502(always_101: int) -> None:
    controller = DrainController(drain_timeout=5)
    config = GateConfig(
        listen_port=0, listen_host="127.0.0.1", upstream_port=always_101, check_interval=0.1
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        gate = Gate(port, 0, controller)
        async with httpx.AsyncClient() as client:
            await until_ready(client, gate)
        answer = await exchange(
            port, b"GET /plain HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 502 "), answer[:80]
        assert b"raw bytes of another protocol" not in answer
        tg.cancel_scope.cancel()
