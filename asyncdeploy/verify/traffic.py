"""Continuous traffic of the requests the user named, every request accounted for.

Requests go to a :class:`Target`: verify's own :class:`Router`, which sends each request to a
*ready* endpoint as kube-proxy or an ingress would (it polls every endpoint's readiness, so a
draining instance stops receiving new requests one poll after it starts failing readiness) and
retries a refusal on another endpoint; or a real load balancer's one address (no retry: whatever
the balancer answers, the client keeps).

The clients behave as the SDKs users have (the OpenAI SDK, httpx, aiohttp): each kind of request
is one client with its own pool of HTTP/1.1 connections, kept alive and reused
(:class:`Clients`); ``connection="close"`` opens a fresh connection for every request instead.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal, Protocol

import aiohttp
import anyio
import attrs

from asyncdeploy.verify.requests import RequestSpec

__all__ = [
    "CONNECTIONS",
    "GATED_OUTCOMES",
    "OUTCOMES",
    "SERVED_BY_HEADERS",
    "Clients",
    "Connection",
    "Endpoint",
    "RequestRecord",
    "Router",
    "SingleEndpoint",
    "Target",
    "TrafficMix",
    "opened_clients",
    "send_traffic",
]

ClientOutcome = Literal[
    "completed",  # the whole answer arrived (a stream with its final marker, when one is named)
    "refused",  # answered 503 in the end: through a balancer at once, by the router after retries
    "unavailable",  # the connection was refused: nothing listened any more
    "client-aborted",  # our own client hung up mid-stream (fault injection)
    "truncated",  # the answer started and was cut short (or cut at the drain deadline)
    "lost",  # sent, and no answer at all (reset, timeout)
    "failed",  # any other status than the one expected
    "duplicated",  # admitted by two instances
]
OUTCOMES: tuple[ClientOutcome, ...] = (
    "completed",
    "refused",
    "unavailable",
    "client-aborted",
    "truncated",
    "lost",
    "failed",
    "duplicated",
)
# "unavailable" fails a run too: the router stops sending to an instance one poll after its
# readiness fails, long before a draining server closes its listener, so a refused connection
# means the instance went away under traffic (and a request cut that way may hide behind it).
GATED_OUTCOMES: tuple[ClientOutcome, ...] = (
    "refused",
    "unavailable",
    "truncated",
    "lost",
    "failed",
    "duplicated",
)
READY_POLL_SECONDS = 0.25
Connection = Literal["keep-alive", "close"]
CONNECTIONS: tuple[Connection, ...] = ("keep-alive", "close")
#: The pool of one client (aiohttp's default, as the SDKs' pools are in the hundreds).
POOL_SIZE = 100
# who served a request: the balancer's server name first, then the demo server's own header
SERVED_BY_HEADERS = ("X-Asyncdeploy-Server", "X-Served-By")


@attrs.frozen(kw_only=True)
class TrafficMix:
    """The demo server's requests and rates (per second), and the client-side behaviour."""

    short_per_second: float = 5.0
    long_per_second: float = 1.0
    stream_per_second: float = 2.0
    long_seconds: float = 3.0
    stream_tokens: int = 30
    stream_pace: float = 0.1
    client_abort_every: int = 0  # every Nth stream is abandoned mid-way by the client; 0: never
    client_abort_after_lines: int = 80  # ... after this many lines (the demo: 4 per token)
    retries: int = 2  # verify's router retries a refusal on another ready endpoint
    request_timeout: float = 120.0

    def demo_requests(self) -> tuple[RequestSpec, ...]:
        """``/short``, ``/long`` and ``/stream`` of the demo server, at the mix's rates."""
        stream = f"/stream?tokens={self.stream_tokens}&pace={self.stream_pace}"
        return (
            RequestSpec(name="short", path="/short", rate=self.short_per_second),
            RequestSpec(
                name="long", path=f"/long?seconds={self.long_seconds}", rate=self.long_per_second
            ),
            RequestSpec(
                name="stream",
                path=stream,
                stream=True,
                until="event: done",
                rate=self.stream_per_second,
            ),
        )


@attrs.define
class RequestRecord:
    """Everything known about one request: who served it, when, and how it ended."""

    id: str
    kind: str  # the request's name (its row in the report)
    started: float
    ended: float | None = None
    endpoint: str | None = None
    instance: str | None = None
    status: int | None = None
    bytes: int = 0
    done_frame: bool = False  # a stream's final marker arrived
    outcome: ClientOutcome | None = None
    error: str | None = None
    attempts: int = 0
    refusals: int = 0  # 503s seen (a retried one may still complete)
    admitted_by: list[str] = attrs.field(factory=list)


@attrs.define
class Endpoint:
    name: str
    base_url: str
    ready: bool = False


class Target(Protocol):
    """Where requests go: ``pick`` an endpoint (``None``: send nothing now)."""

    def pick(self, avoid: str | None = None) -> Endpoint | None: ...


@attrs.define
class SingleEndpoint:
    """A load balancer's address: always picked; the balancer chooses the instance."""

    endpoint: Endpoint

    def pick(self, avoid: str | None = None) -> Endpoint | None:
        return self.endpoint


@attrs.define
class Router:
    """Routes requests to ready endpoints, round robin; polls readiness in the background."""

    endpoints: dict[str, Endpoint] = attrs.field(factory=dict)
    ready_path: str = "/ready"
    _turn: Iterator[int] = attrs.field(factory=itertools.count)

    def add(self, name: str, base_url: str) -> None:
        self.endpoints[name] = Endpoint(name=name, base_url=base_url)

    def remove(self, name: str) -> None:
        self.endpoints.pop(name, None)

    def pick(self, avoid: str | None = None) -> Endpoint | None:
        ready = [e for e in self.endpoints.values() if e.ready and e.name != avoid]
        if not ready:
            return None
        return ready[next(self._turn) % len(ready)]

    async def poll(self, session: aiohttp.ClientSession) -> None:
        """Keep every endpoint's ``ready`` flag current until cancelled."""
        while True:
            for endpoint in list(self.endpoints.values()):
                endpoint.ready = await _is_ready(session, endpoint.base_url + self.ready_path)
            await anyio.sleep(READY_POLL_SECONDS)


async def _is_ready(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        with anyio.fail_after(1):
            async with session.get(url) as response:
                return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


Clients = Callable[[RequestSpec], aiohttp.ClientSession]
"""The client that sends a kind of request."""


@asynccontextmanager
async def opened_clients(
    requests: Sequence[RequestSpec], connection: Connection = "keep-alive"
) -> AsyncIterator[Clients]:
    """One client per kind of request, as an application has one SDK client per purpose: a
    pool of kept-alive HTTP/1.1 connections, reused from request to request; with
    ``connection="close"`` a fresh connection for every request. All closed on the way out."""
    async with AsyncExitStack() as stack:
        sessions: dict[str, aiohttp.ClientSession] = {}
        for spec in requests:
            if spec.label not in sessions:
                connector = aiohttp.TCPConnector(force_close=connection == "close", limit=POOL_SIZE)
                session = aiohttp.ClientSession(connector=connector)
                sessions[spec.label] = await stack.enter_async_context(session)
        yield lambda spec: sessions[spec.label]


async def send_traffic(
    session: aiohttp.ClientSession | Clients,
    target: Target,
    requests: Sequence[RequestSpec],
    mix: TrafficMix,
    stop: anyio.Event,
    records: list[RequestRecord],
    *,
    retries: int | None = None,
) -> None:
    """Issue each request at its rate until ``stop`` is set; wait for all of them to end.

    ``session``: one session for every request, or the client of each kind (:func:`opened_clients`).
    ``retries`` (default: the mix's) is how often a 503 is tried again on another endpoint."""
    tries = 1 + (mix.retries if retries is None else retries)
    clients: Clients = (
        (lambda _: session) if isinstance(session, aiohttp.ClientSession) else session
    )
    streams: Counter[str] = Counter()
    async with anyio.create_task_group() as in_flight:

        async def issue(spec: RequestSpec) -> None:
            if spec.rate <= 0:
                return
            interval = 1.0 / spec.rate
            next_at = anyio.current_time()
            while not stop.is_set():
                if target.pick() is not None:  # nothing is sent while no endpoint is ready
                    record = RequestRecord(
                        id=uuid.uuid4().hex[:16], kind=spec.label, started=time.time()
                    )
                    records.append(record)
                    streams[spec.label] += spec.stream
                    abort = (
                        spec.stream
                        and mix.client_abort_every > 0
                        and streams[spec.label] % mix.client_abort_every == 0
                    )
                    in_flight.start_soon(
                        _request, clients(spec), target, spec, mix, record, tries, abort
                    )
                next_at += interval
                with anyio.move_on_after(max(0.0, next_at - anyio.current_time())):
                    await stop.wait()

        async with anyio.create_task_group() as issuers:
            for spec in requests:
                issuers.start_soon(issue, spec)


async def _request(
    session: aiohttp.ClientSession,
    target: Target,
    spec: RequestSpec,
    mix: TrafficMix,
    record: RequestRecord,
    tries: int,
    abort: bool,
) -> None:
    avoid: str | None = None
    try:
        with anyio.fail_after(mix.request_timeout):
            for _ in range(tries):
                endpoint = target.pick(avoid=avoid) or target.pick()
                if endpoint is None:
                    break
                record.attempts += 1
                record.endpoint = endpoint.name
                retry = await _attempt(session, endpoint, spec, mix, record, abort)
                if not retry:
                    break
                avoid = endpoint.name
                await anyio.sleep(0.1)
    except TimeoutError:
        record.outcome = "truncated" if record.status is not None else "lost"
        record.error = f"no end within {mix.request_timeout:g} s"
    finally:
        record.ended = time.time()
        if len(set(record.admitted_by)) > 1:
            record.outcome = "duplicated"


async def _attempt(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    spec: RequestSpec,
    mix: TrafficMix,
    record: RequestRecord,
    abort: bool,
) -> bool:
    """One try; True when it was refused with ``Retry-After`` (another endpoint may take it)."""
    headers = {"X-Request-ID": record.id, **dict(spec.headers)}
    content_type = spec.content_type()
    if content_type is not None:
        headers["Content-Type"] = content_type
    record.status = None
    try:
        async with session.request(
            spec.method, endpoint.base_url + spec.path, data=spec.body, headers=headers
        ) as response:
            record.status = response.status
            record.instance = next(
                (response.headers[h] for h in SERVED_BY_HEADERS if h in response.headers),
                endpoint.name,
            )
            if response.status == 503:
                record.refusals += 1
                record.outcome = "refused"
                record.error = f"HTTP 503 from {record.instance} (tries: {record.attempts})"
                return "Retry-After" in response.headers
            if not spec.expected(response.status):
                record.outcome, record.error = "failed", f"HTTP {response.status}"
                return False
            record.admitted_by.append(record.instance)
            if spec.stream:
                await _read_stream(
                    response, spec, record, mix.client_abort_after_lines if abort else None
                )
            else:
                body = await response.read()
                record.bytes += len(body)
                if response.content_type == "application/json":
                    json.loads(body)  # a cut body does not parse
                record.outcome = "completed"
    except aiohttp.ClientConnectorError as exc:
        record.outcome, record.error = "unavailable", str(exc)
    except (aiohttp.ClientError, ValueError) as exc:
        # After the status line: the answer was cut. Before it: the request was lost (a reset).
        record.outcome = "truncated" if record.status is not None else "lost"
        record.error = f"{type(exc).__name__}: {exc}"
    return False


async def _read_stream(
    response: aiohttp.ClientResponse,
    spec: RequestSpec,
    record: RequestRecord,
    abort_after_lines: int | None,
) -> None:
    lines = 0
    tail = b""
    marker = None if spec.until is None else spec.until.encode()
    async for raw in response.content:  # line by line, as it arrives
        record.bytes += len(raw)
        lines += 1
        if marker is not None and not record.done_frame:
            tail = (tail + raw)[-(len(marker) + len(raw)) :]
            record.done_frame = marker in tail
        if abort_after_lines is not None and lines >= abort_after_lines:
            record.outcome = "client-aborted"
            response.close()
            return
    if marker is None:
        record.done_frame = True  # the body ended cleanly: aiohttp raises on a cut chunked body
    record.outcome = "completed" if record.done_frame else "truncated"
    if not record.done_frame:
        record.error = f"stream ended after {lines} lines without {spec.until!r}"
