"""Keep-alive clients through the gate to an engine that closes its connection after every
streamed answer while its headers say Keep-Alive, as llama.cpp's ``llama-server`` does
(tests/images/closing_engine.py). Every OpenAI call is a POST with a body: none may see a 502
from a reused upstream connection the engine closed, and none may reach the engine twice.

On asyncio's own loop and on uvloop, as every gate test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.workload import DrainController, PropagationWindow
from tests.polling import until
from tests.workload.test_gate_proxy import anyio_backend, free_port

__all__ = ["anyio_backend"]  # the asyncio / uvloop parametrization, shared

pytestmark = pytest.mark.anyio
ENGINE = Path(__file__).parents[1] / "images" / "closing_engine.py"
CALLS = 60


@pytest.fixture(params=[0.0, 2.0], ids=["close-at-once", "close-2ms-later"])
def closing_engine(request: pytest.FixtureRequest) -> Iterator[int]:
    """The engine closes right after the last chunk (as recorded from llama-server), or 2 ms
    later: then the client's next request has reached the old connection before the close."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ENGINE), "--port", str(port), "--close-delay-ms", str(request.param)],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
async def gate_url(closing_engine: int) -> AsyncIterator[str]:
    controller = DrainController(propagation=PropagationWindow(max_seconds=0.5))
    config = GateConfig(
        listen_port=0, listen_host="127.0.0.1", upstream_port=closing_engine, check_interval=0.05
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:

            async def ready() -> bool:
                return (await client.get(f"{url}/ready")).status_code == 200

            await until(ready, timeout=20, interval=0.05)
        yield url
        tg.cancel_scope.cancel()


async def chat(client: httpx.AsyncClient, url: str, *, stream: bool, key: str | None = None) -> str:
    """One chat completion (with an ``Idempotency-Key``, when given); what went wrong, or ''
    for a whole answer."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": stream}
    headers = {"Idempotency-Key": key} if key else {}
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers
    ) as response:
        text = (await response.aread()).decode()
    if response.status_code != 200:
        return f"{response.status_code} {text[:60]}"
    if stream and not text.endswith("data: [DONE]\n\n"):
        return f"stream without [DONE]: {text[-60:]!r}"
    return ""


async def test_keep_alive_posts_to_an_engine_that_closes_after_each_stream_never_see_a_502(
    gate_url: str,
) -> None:
    """Back-to-back streaming POSTs on one kept-alive client connection (with plain ones
    between, on the connection the engine keeps): every answer whole, and the engine received
    each request exactly once (a replay only ever resends what it never read)."""
    failures: list[str] = []
    async with httpx.AsyncClient(timeout=20) as client:
        for i in range(CALLS):
            if failure := await chat(client, gate_url, stream=i % 5 != 4):
                failures.append(failure)
        received = int((await client.get(f"{gate_url}/requests")).text)
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert len(pool.connections) == 1  # one client connection carried them all
    assert failures == []
    assert received == CALLS


async def test_pipelined_posts_behind_a_stream_are_each_answered_once(gate_url: str) -> None:
    """Two streaming POSTs written at once: the second waits in the gate while the first
    streams, then goes to the engine on a fresh connection (the first one closed)."""
    body = json.dumps({"messages": [], "max_tokens": 3, "stream": True}).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    port = int(gate_url.rsplit(":", 1)[1])
    received = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request * 2)
        with anyio.fail_after(10):
            while received.count(b"data: [DONE]") < 2:
                received += await stream.receive()
    assert received.count(b"HTTP/1.1 200 OK") == 2
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{gate_url}/requests")).text == "2"


async def _engine_count(client: httpx.AsyncClient, url: str, what: str) -> int:
    return int((await client.get(f"{url}/{what}")).text)


async def test_gets_share_kept_engine_connections_and_a_post_gets_a_fresh_one(
    gate_url: str,
) -> None:
    """What a retry may repeat (a GET) rides kept-alive engine connections: the gate's cost
    per request is HAProxy's. A POST without an ``Idempotency-Key`` gets an engine connection
    of its own, so that it is never sent where the engine may close under it."""
    async with httpx.AsyncClient(timeout=20) as client:
        before = await _engine_count(client, gate_url, "connections")
        for _ in range(CALLS):
            assert (await client.get(f"{gate_url}/health")).status_code == 200
        after_gets = await _engine_count(client, gate_url, "connections")
        for _ in range(10):
            assert await chat(client, gate_url, stream=False) == ""
        after_posts = await _engine_count(client, gate_url, "connections")
    # (each count is a GET of its own: on a kept connection too)
    assert after_gets - before <= 2, f"{CALLS} GETs took {after_gets - before} engine connections"
    assert after_posts - after_gets >= 10, "each POST on a fresh engine connection"


async def test_keyed_posts_to_an_engine_that_closes_after_each_stream_are_retried_once(
    gate_url: str,
) -> None:
    """Streaming POSTs with an ``Idempotency-Key`` ride kept connections: the one the engine
    closed after the previous stream fails the next request before the engine read it, and the
    gate retries it on a fresh one (RFC 9110 §9.2.2 allows it: the client said a repeat is
    safe). Every answer whole, each request received once."""
    failures: list[str] = []
    async with httpx.AsyncClient(timeout=20) as client:
        before = await _engine_count(client, gate_url, "requests")
        for i in range(CALLS):
            if failure := await chat(client, gate_url, stream=True, key=f"k{i}"):
                failures.append(failure)
        received = await _engine_count(client, gate_url, "requests") - before
    assert failures == []
    assert received == CALLS
