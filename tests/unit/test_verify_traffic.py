"""verify's clients against a real HTTP server on loopback: the user's requests arrive as named,
and every request is counted by what the client saw (a refusal it kept is a failure)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import anyio
import pytest
from aiohttp import web

from asyncdeploy._events import ContainerOutcome, DrainFinished, DrainSummary
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.requests import parse_request
from asyncdeploy.verify.run import LASTING_AFTER, _lasting
from asyncdeploy.verify.traffic import (
    Endpoint,
    RequestRecord,
    Router,
    SingleEndpoint,
    TrafficMix,
    opened_clients,
    send_traffic,
)

pytestmark = pytest.mark.anyio

seen: list[tuple[str, str, bytes, str | None]] = []
peers: list[object] = []  # the client address of every /echo request: one per connection


async def _refuse(request: web.Request) -> web.Response:
    return web.Response(status=503, headers={"Retry-After": "1"}, text="draining")


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    peers.append(request.transport.get_extra_info("peername") if request.transport else None)
    seen.append((request.method, request.path_qs, body, request.headers.get("X-Tenant")))
    return web.json_response({"ok": True}, status=201)


async def _sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for i in range(3):
        await response.write(b"data: %d\n\n" % i)
        await anyio.sleep(0.01)
    if request.query.get("done") == "1":
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _ready(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/ready", _ready)
    app.router.add_get("/refuse", _refuse)
    app.router.add_route("*", "/echo", _echo)
    app.router.add_get("/sse", _sse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _run(target: object, lines: list[str], seconds: float, **kw: int) -> VerifyReport:
    requests = [parse_request(line) for line in lines]
    records: list[RequestRecord] = []
    stop = anyio.Event()
    async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
        if isinstance(target, Router):
            tg.start_soon(target.poll, session)
        await anyio.sleep(0.3)  # the router has seen the endpoint ready
        async with anyio.create_task_group() as traffic:
            traffic.start_soon(
                lambda: send_traffic(
                    session,
                    target,  # type: ignore[arg-type]
                    requests,
                    TrafficMix(),
                    stop,
                    records,
                    **kw,  # type: ignore[arg-type]
                )
            )
            await anyio.sleep(seconds)
            stop.set()
        tg.cancel_scope.cancel()
    finished = DrainFinished(
        workload="w",
        elapsed=1.0,
        summary=DrainSummary(
            workload="w",
            grace_period_seconds=5,
            seconds=1.0,
            containers=(
                ContainerOutcome(name="s", role="run", outcome="exited", exit_code=0, seconds=1.0),
            ),
        ),
    )
    return VerifyReport(
        driver="none",
        mode="delete",
        records=tuple(records),
        events=(finished,),
        drain_started_at=None,
        request_names=tuple(r.label for r in requests),
    )


async def test_a_request_refused_on_every_try_is_a_failure(server: str) -> None:
    """Issue 16 item 13: the router retries a 503 + Retry-After, but one refused on all three
    tries reached no server: the report fails (it passed before)."""
    router = Router()
    router.add("only", server)
    report = await _run(router, ["/refuse rate=10 name=refused"], 0.5)
    records = report.records
    assert records and all(r.outcome == "refused" and r.attempts == 3 for r in records)
    assert not report.passed
    assert report.counts()["refused"]["refused"] == len(records)
    assert "FAIL" in report.text()


async def test_behind_a_balancer_a_503_is_never_retried(server: str) -> None:
    """Through a balancer's one address the client keeps the first answer: one try each."""
    target = SingleEndpoint(Endpoint(name="lb", base_url=server, ready=True))
    report = await _run(target, ["/refuse rate=10"], 0.4, retries=0)
    assert report.records and all(r.attempts == 1 for r in report.records)
    assert not report.passed


async def test_the_users_requests_arrive_as_named(server: str) -> None:
    """Method, path, body, headers reach the server; 201 is the expected status."""
    seen.clear()
    target = SingleEndpoint(Endpoint(name="lb", base_url=server, ready=True))
    line = 'POST /echo?x=1 body=\'{"prompt": "hi"}\' header=X-Tenant:t1 rate=10 expect=201'
    report = await _run(target, [line], 0.4, retries=0)
    assert report.records and not report.bad, report.text()
    assert seen and set(seen) == {("POST", "/echo?x=1", b'{"prompt": "hi"}', "t1")}
    assert report.counts()["POST /echo?x=1"]["completed"] == len(report.records)


async def test_a_stream_is_complete_only_with_its_marker(server: str) -> None:
    """``until`` names the text that ends a stream; a stream that ends without it is truncated."""
    target = SingleEndpoint(Endpoint(name="lb", base_url=server, ready=True))
    report = await _run(
        target,
        [
            "/sse?done=1 stream until=[DONE] rate=10 name=done",
            "/sse stream until=[DONE] rate=10 name=cut",
            "/sse stream rate=10 name=plain",
        ],
        0.4,
        retries=0,
    )
    counts = report.counts()
    assert counts["done"]["completed"] >= 2 and set(counts["done"]) == {"completed"}
    assert counts["cut"]["truncated"] >= 2 and set(counts["cut"]) == {"truncated"}
    assert counts["plain"]["completed"] >= 2 and set(counts["plain"]) == {"completed"}
    assert not report.passed


async def test_a_wrong_status_is_a_failure(server: str) -> None:
    """A user's path the server does not know (404) fails the run, as it always should have."""
    target = SingleEndpoint(Endpoint(name="lb", base_url=server, ready=True))
    report = await _run(target, ["/nowhere rate=10"], 0.3, retries=0)
    assert report.records and {r.outcome for r in report.records} == {"failed"}
    assert not report.passed


@pytest.mark.parametrize("connection", ["keep-alive", "close"])
async def test_clients_keep_their_connections_alive_as_sdks_do(
    server: str, connection: str
) -> None:
    """Issue 23: verify's clients were one fresh connection per request, so neither a balancer
    nor a gate ever reused one. Now each kind of request is a client with a kept-alive pool
    (HTTP/1.1), reused from request to request; ``--connection close`` keeps one per request."""
    peers.clear()
    requests = [parse_request("POST /echo body=x rate=20 expect=201 name=a"),
                parse_request("POST /echo body=y rate=20 expect=201 name=b")]  # fmt: skip
    target = SingleEndpoint(Endpoint(name="lb", base_url=server, ready=True))
    records: list[RequestRecord] = []
    stop = anyio.Event()
    async with opened_clients(requests, connection) as clients:  # type: ignore[arg-type]
        assert clients(requests[0]) is not clients(requests[1])  # a pool per client
        async with anyio.create_task_group() as tg:
            tg.start_soon(send_traffic, clients, target, requests, TrafficMix(), stop, records)
            await anyio.sleep(0.6)
            stop.set()
    assert len(records) >= 16 and {r.outcome for r in records} == {"completed"}
    assert len(peers) == len(records)
    if connection == "keep-alive":
        assert len(set(peers)) <= 4, peers  # the requests of each client share its pool
    else:
        assert len(set(peers)) == len(peers)  # a connection each


def test_the_disruption_waits_for_a_request_that_will_still_be_in_flight() -> None:
    """A short request just sent has often ended by the time the drain begins (a replace's
    routing first): verify waits for one answering, or outstanding half a second."""
    now = 1000.0
    just_sent = RequestRecord(id="a", kind="short", started=now - 0.01)
    answering = RequestRecord(id="b", kind="stream", started=now - 0.01, bytes=120)
    outstanding = RequestRecord(id="c", kind="completion", started=now - LASTING_AFTER)
    ended = RequestRecord(id="d", kind="stream", started=now - 5, ended=now - 1, bytes=900)
    assert not _lasting(just_sent, now) and not _lasting(ended, now)
    assert _lasting(answering, now) and _lasting(outstanding, now)
