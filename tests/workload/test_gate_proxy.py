"""The gate in front of a real server process that knows nothing of the kit
(tests/images/stock_engine.py), on loopback: readiness, pass-through, counting, drain.

Every test runs on asyncio's own event loop and on uvloop (what ``python3 -m asyncdeploy.gate``
uses when installed, and the gate image has): the relay is protocol callbacks on either."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.gate._limits import Limits
from asyncdeploy.verify._ports import free_port
from asyncdeploy.workload import DrainController, DrainState, PropagationWindow
from tests.polling import until

pytestmark = pytest.mark.anyio
ENGINE = Path(__file__).parents[1] / "images" / "stock_engine.py"


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    if request.param[1]["use_uvloop"]:
        pytest.importorskip("uvloop", reason="uvloop is in the test dependency group")
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def load_seconds() -> float:
    """How long the engine loads (its /health 503): a test of the STARTING state waits longer."""
    return 0.2


@pytest.fixture
def engine(load_seconds: float) -> Iterator[subprocess.Popen[bytes]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--load-seconds", str(load_seconds), "--token-ms", "50", "--short-ms", "0"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    process.port = port  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.terminate()
        process.wait(10)


class Gate:
    def __init__(self, port: int, admin_port: int, controller: DrainController) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.admin_port = admin_port
        self.admin_url = f"http://127.0.0.1:{admin_port}"
        self.controller = controller


@pytest.fixture
def idle_timeout() -> float:
    return 300.0


@pytest.fixture
async def gate(engine: subprocess.Popen[bytes], idle_timeout: float) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=10, propagation=PropagationWindow(max_seconds=0.5, quiet_seconds=0.2)
    )
    admin_port = free_port()
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=engine.port,  # type: ignore[attr-defined]
        check_interval=0.1,
        limits=Limits(idle_timeout=idle_timeout),
        admin_port=admin_port,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        yield Gate(port, admin_port, controller)
        tg.cancel_scope.cancel()


async def status_is(client: httpx.AsyncClient, url: str, status: int) -> bool:
    return (await client.get(url)).status_code == status


async def until_ready(client: httpx.AsyncClient, gate: Gate) -> None:
    await until(lambda: status_is(client, f"{gate.url}/ready", 200), timeout=30, interval=0.05)


@pytest.mark.parametrize("load_seconds", [1.5])
async def test_ready_only_once_the_engines_own_health_path_answers(gate: Gate) -> None:
    """While the engine loads (its /health 503, or not listening) the gate is not ready and
    refuses requests as STARTING; then ready, and requests pass."""
    async with httpx.AsyncClient() as client:
        first = await client.get(f"{gate.url}/ready")
        assert first.status_code == 503
        assert first.json()["state"] == "starting"
        refused = await client.get(f"{gate.url}/short")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        await until_ready(client, gate)
        assert (await client.get(f"{gate.url}/ready")).json()["engine"] is True
        assert (await client.get(f"{gate.url}/short")).json() == {"ok": True}
        assert (await client.get(f"{gate.url}/live")).status_code == 200


async def test_streams_pass_token_by_token_and_count_in_flight_to_the_last_byte(gate: Gate) -> None:
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        started = time.monotonic()
        arrivals = []
        async with client.stream("GET", f"{gate.url}/stream?tokens=20&ms=50") as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.monotonic() - started)
                    if len(arrivals) == 1:  # the controller reads HAProxy's count each 50 ms
                        await until(lambda: gate.controller.in_flight == 1, timeout=5)
                    elif len(arrivals) < 20:  # the last token may share the final write
                        assert gate.controller.in_flight == 1
        assert len(arrivals) == 20
        # Unbuffered: the first token arrives long before the stream's end (1 s).
        assert arrivals[0] < arrivals[-1] - 0.5
        await until(lambda: gate.controller.in_flight == 0, timeout=5)
        statistics = gate.controller.statistics()
        assert statistics.completed >= 1 and statistics.failed == 0


async def test_bodies_of_any_framing_and_the_engines_own_paths_pass_unchanged(gate: Gate) -> None:
    body = bytes(range(256)) * 20000  # 5 MB
    digest = hashlib.sha256(body).hexdigest()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 700_001):
            yield body[i : i + 700_001]

    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        sized = await client.post(f"{gate.url}/echo", content=body)
        chunked = await client.post(f"{gate.url}/echo", content=pieces())
        assert sized.json() == chunked.json() == {"length": len(body), "sha256": digest}
        assert (await client.get(f"{gate.url}/metrics")).text.startswith("engine_requests_total")
        assert (await client.get(f"{gate.url}/nope")).status_code == 404
        head = await client.head(f"{gate.url}/short")
        assert head.status_code == 200
        completion = await client.post(
            f"{gate.url}/v1/completions", json={"max_tokens": 3, "stream": False}
        )
        assert completion.json() == {"choices": [{"text": "tok0 tok1 tok2"}]}
        assert "asyncdeploy_state" in (await client.get(f"{gate.url}/-/metrics")).text


async def test_keep_alive_is_kept_to_the_client_and_a_post_gets_a_fresh_engine_connection(
    gate: Gate,
) -> None:
    """The client keeps its one connection. GETs (which a retry may repeat) share kept engine
    connections; a POST gets a fresh one each (HAProxy's ``http-server-close``: it never meets
    an engine connection closing under it, the llama-server race, so it is never failed or
    replayed for it)."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)

        def connections(metrics: httpx.Response) -> int:
            assert metrics.status_code == 200, metrics.text
            return int(metrics.text.split("engine_connections_total ")[1].split()[0])

        before = connections(await client.get(f"{gate.url}/metrics"))
        for _ in range(20):
            assert (await client.get(f"{gate.url}/short")).status_code == 200
        after_gets = connections(await client.get(f"{gate.url}/metrics"))
        assert after_gets - before <= 2  # the kept one (and one more, if the engine closed it)
        for _ in range(20):
            assert (await client.post(f"{gate.url}/echo", content=b"x")).status_code == 200
        after_posts = connections(await client.get(f"{gate.url}/metrics"))
        assert after_posts - after_gets == 20  # one each
        # httpx reused one connection: a second one would show as another pool entry
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert len(pool.connections) == 1


async def test_the_drain_serves_through_the_window_then_refuses_and_waits_for_streams(
    gate: Gate,
) -> None:
    """GET /-/drain: ready fails at once, a request inside the window is served, one after it
    refused with 503 + Retry-After + Connection: close; the stream admitted before completes
    and the drain answers once it has."""
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tg:
        await until_ready(client, gate)
        tokens: list[str] = []

        async def stream() -> None:
            # 5 s: it outlasts the 1 s window and the polls after it by seconds (at 1.5 s a
            # loaded machine saw it end before the refusal below, and the drain answer)
            url = f"{gate.url}/stream?tokens=100&ms=50"
            async with httpx.AsyncClient(timeout=30) as own, own.stream("GET", url) as response:
                tokens.extend(
                    [line async for line in response.aiter_lines() if line.startswith("data: ")]
                )

        tg.start_soon(stream)
        await anyio.sleep(0.3)
        drain: list[httpx.Response] = []

        async def call_drain() -> None:
            url = f"{gate.admin_url}/-/drain?propagation_wait=1s&timeout=20s"
            drain.append(await client.get(url))

        tg.start_soon(call_drain)
        await anyio.sleep(0.1)
        assert gate.controller.state is DrainState.DRAINING
        async with httpx.AsyncClient() as other:
            inside = await other.get(f"{gate.url}/short")
            assert inside.status_code == 200 and inside.headers["connection"] == "close"
            # a probe answered "not ready" tells the kit a balancer saw the drain
            assert (await other.get(f"{gate.url}/ready")).status_code == 503
            await until(lambda: status_is(other, f"{gate.url}/short", 503), timeout=10)
            after = await other.get(f"{gate.url}/short")
            assert after.status_code == 503
            assert after.headers["retry-after"] == "5" and after.headers["connection"] == "close"
            assert not drain  # the stream still runs: the drain has not answered
    assert len(tokens) == 101 and tokens[-1] == "data: [DONE]"
    report = drain[0].json()
    assert drain[0].status_code == 200 and report["drained"] is True
    assert report["statistics"]["failed"] == 0 and report["statistics"]["in_flight"] == 0


async def test_an_engine_that_is_gone_is_a_502_counted_as_failed(
    gate: Gate, engine: subprocess.Popen[bytes]
) -> None:
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        engine.terminate()  # the stock engine exits at once on SIGTERM, as vLLM does by default
        engine.wait(10)
        await until(lambda: status_is(client, f"{gate.url}/short", 502), timeout=10)
        await until(lambda: gate.controller.statistics().failed >= 1, timeout=10)


async def test_the_drain_command_drains_a_running_gate(
    gate: Gate, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python3 -m asyncdeploy.gate drain --port ADMIN` (for an exec hook): exit 0 once
    drained, the report on stdout; 2 when no gate answers."""
    from asyncdeploy.gate.__main__ import _drain

    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    assert await _drain(gate.admin_port, "0.2s", 10.0, None) == 0
    assert '"drained":true' in capsys.readouterr().out
    assert gate.controller.state is DrainState.DRAINING
    assert await _drain(free_port(), None, 2.0, None) == 2


async def raw_exchange(gate: Gate, data: bytes) -> bytes:
    """Send bytes as they are on a new connection; what came back until the gate closed it
    (the bytes end with a request that asks it to, or one it refuses)."""
    port = int(gate.url.rsplit(":", 1)[1])
    received = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        with anyio.fail_after(30):
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return received


async def test_pipelined_requests_are_answered_in_order_on_one_connection(gate: Gate) -> None:
    """Three requests in one write (the second with a body): three answers, in order."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    body = b"x" * 100_000
    pipelined = (
        b"GET /short HTTP/1.1\r\nHost: g\r\n\r\n"
        b"POST /echo HTTP/1.1\r\nHost: g\r\nContent-Length: %d\r\n\r\n%s"
        b"GET /nope HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n" % (len(body), body)
    )
    answers = await raw_exchange(gate, pipelined)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)
    assert statuses == [b"200", b"200", b"404"]
    assert answers.index(b'{"ok":true}') < answers.index(hashlib.sha256(body).hexdigest().encode())
    # the kit follows HAProxy's counters one read behind
    await until(lambda: gate.controller.statistics().completed == 3, timeout=10)


async def test_a_garbled_chunked_request_body_is_a_400_and_the_gate_serves_on(
    gate: Gate,
) -> None:
    """A chunk size that is not hex: that client gets 400; every other client is served as
    before (the streams relay let the parse error escape and end the gate). llhttp framed the
    whole request before it was taken: it never reached the engine, and nothing was admitted
    for it (a body found bad mid-relay is counted failed)."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        garbled = (
            b"POST /echo HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\nzz\r\n"
        )
        answer = await raw_exchange(gate, garbled)
        assert answer.startswith(b"HTTP/1.1 400 ")
        await anyio.sleep(0.2)
        assert (await client.get(f"{gate.url}/short")).json() == {"ok": True}
        await until(lambda: gate.controller.statistics().completed >= 1, timeout=10)
        await anyio.sleep(0.2)  # two more reads of HAProxy's counters
        statistics = gate.controller.statistics()
        assert (statistics.admitted, statistics.completed) == (1, 1)  # the /short alone
        assert statistics.failed == 0 and statistics.in_flight == 0


async def test_a_client_gone_mid_stream_is_counted_and_frees_the_engine(gate: Gate) -> None:
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        port = int(gate.url.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(b"GET /stream?tokens=100&ms=50 HTTP/1.1\r\nHost: g\r\n\r\n")
            received = b""
            while b"data: " not in received:
                received += await stream.receive()
            await until(lambda: gate.controller.in_flight == 1, timeout=10)
        await until(lambda: gate.controller.in_flight == 0, timeout=10)
        statistics = gate.controller.statistics()
        assert statistics.client_disconnected == 1 and statistics.failed == 0


@pytest.mark.parametrize("idle_timeout", [0.3])
async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    gate: Gate,
) -> None:
    # Readiness polled on a fresh connection each time: a pooled one idle past the gate's
    # 0.3 s (a loaded machine's gap between two polls) is closed under the next request.
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=fresh) as client:
        await until_ready(client, gate)
    started = time.monotonic()
    answer = await raw_exchange(gate, b"GET /short HTTP/1.1\r\nHost: g\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"ok":true}')
    assert 0.3 <= time.monotonic() - started < 20  # closed by the gate, not by the client


async def test_an_engine_killed_mid_stream_is_a_visibly_cut_answer_counted_as_failed(
    gate: Gate, engine: subprocess.Popen[bytes]
) -> None:
    """The engine dies (SIGKILL) while the gate relays its stream: the client sees the answer
    end unfinished (no last chunk), never a complete-looking one; the exchange is counted
    failed, nothing stays in flight, and the gate itself keeps answering."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        tokens = 0

        async def read_until_the_kill() -> None:
            nonlocal tokens
            async with client.stream("GET", f"{gate.url}/stream?tokens=100&ms=50") as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        tokens += 1
                        if tokens == 3:
                            engine.kill()

        with pytest.raises(httpx.HTTPError):  # httpx: the chunked body ended before its end
            await read_until_the_kill()
        assert 3 <= tokens < 100
        await until(lambda: gate.controller.in_flight == 0, timeout=10)
        assert gate.controller.statistics().failed == 1
        assert (await client.get(f"{gate.url}/live")).status_code == 200
