"""Continuous short, long and streaming traffic, every request accounted for.

A small load balancer (:class:`Router`) sends each request to a *ready* endpoint, as
kube-proxy or an ingress would: it polls every endpoint's readiness, so a draining instance stops
receiving new requests one poll after it starts failing readiness (the propagation delay).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from typing import Literal

import aiohttp
import anyio
import attrs

__all__ = [
    "GATED_OUTCOMES",
    "OUTCOMES",
    "Endpoint",
    "RequestRecord",
    "Router",
    "TrafficMix",
    "send_traffic",
]

Kind = Literal["short", "long", "stream"]
Outcome = Literal[
    "completed",  # the whole answer arrived (a stream with its final done frame)
    "refused-with-retry",  # 503 + Retry-After from the admission gate: never started, safe to retry
    "unavailable",  # the connection was refused: nothing listened any more
    "client-aborted",  # our own client hung up mid-stream (fault injection)
    "truncated",  # the answer started and was cut short (or cut at the drain deadline)
    "lost",  # sent, and no answer at all (reset, timeout)
    "failed",  # any other status
    "duplicated",  # admitted by two instances
]
OUTCOMES: tuple[Outcome, ...] = (
    "completed",
    "refused-with-retry",
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
GATED_OUTCOMES: tuple[Outcome, ...] = ("unavailable", "truncated", "lost", "failed", "duplicated")
READY_POLL_SECONDS = 0.25


@attrs.frozen(kw_only=True)
class TrafficMix:
    """Request rates per kind (per second), their sizes, and the client-side faults."""

    short_per_second: float = 5.0
    long_per_second: float = 1.0
    stream_per_second: float = 2.0
    long_seconds: float = 3.0
    stream_tokens: int = 30
    stream_pace: float = 0.1
    client_abort_every: int = 0  # every Nth stream is abandoned mid-way by the client; 0: never
    retries: int = 2  # a refused request is retried on another ready endpoint
    request_timeout: float = 120.0


@attrs.define
class RequestRecord:
    """Everything known about one request: who served it, when, and how it ended."""

    id: str
    kind: Kind
    started: float
    ended: float | None = None
    endpoint: str | None = None
    instance: str | None = None
    status: int | None = None
    bytes: int = 0
    done_frame: bool = False
    outcome: Outcome | None = None
    error: str | None = None
    attempts: int = 0
    admitted_by: list[str] = attrs.field(factory=list)


@attrs.define
class Endpoint:
    name: str
    base_url: str
    ready: bool = False


@attrs.define
class Router:
    """Routes requests to ready endpoints, round robin; polls readiness in the background."""

    endpoints: dict[str, Endpoint] = attrs.field(factory=dict)
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
                endpoint.ready = await _is_ready(session, endpoint.base_url)
            await anyio.sleep(READY_POLL_SECONDS)


async def _is_ready(session: aiohttp.ClientSession, base_url: str) -> bool:
    try:
        with anyio.fail_after(1):
            async with session.get(f"{base_url}/ready") as response:
                return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def send_traffic(
    session: aiohttp.ClientSession,
    router: Router,
    mix: TrafficMix,
    stop: anyio.Event,
    records: list[RequestRecord],
) -> None:
    """Issue requests at the mix's rates until ``stop`` is set; wait for all of them to end."""
    async with anyio.create_task_group() as in_flight:

        async def issue(kind: Kind, per_second: float) -> None:
            if per_second <= 0:
                return
            interval = 1.0 / per_second
            next_at = anyio.current_time()
            while not stop.is_set():
                if router.pick() is not None:  # nothing is sent while no endpoint is ready
                    record = RequestRecord(id=uuid.uuid4().hex[:16], kind=kind, started=time.time())
                    records.append(record)
                    in_flight.start_soon(_request, session, router, mix, record, len(records))
                next_at += interval
                with anyio.move_on_after(max(0.0, next_at - anyio.current_time())):
                    await stop.wait()

        async with anyio.create_task_group() as issuers:
            issuers.start_soon(issue, "short", mix.short_per_second)
            issuers.start_soon(issue, "long", mix.long_per_second)
            issuers.start_soon(issue, "stream", mix.stream_per_second)


async def _request(
    session: aiohttp.ClientSession,
    router: Router,
    mix: TrafficMix,
    record: RequestRecord,
    serial: int,
) -> None:
    avoid: str | None = None
    try:
        with anyio.fail_after(mix.request_timeout):
            for _ in range(1 + mix.retries):
                endpoint = router.pick(avoid=avoid) or router.pick()
                if endpoint is None:
                    break
                record.attempts += 1
                record.endpoint = endpoint.name
                await _attempt(session, endpoint, mix, record, serial)
                if record.outcome != "refused-with-retry":
                    break
                avoid = endpoint.name
                await anyio.sleep(0.1)
    except TimeoutError:
        record.outcome, record.error = "lost", f"no answer within {mix.request_timeout:g} s"
    finally:
        record.ended = time.time()
        if len(set(record.admitted_by)) > 1:
            record.outcome = "duplicated"


async def _attempt(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    mix: TrafficMix,
    record: RequestRecord,
    serial: int,
) -> None:
    url = {
        "short": f"{endpoint.base_url}/short",
        "long": f"{endpoint.base_url}/long?seconds={mix.long_seconds}",
        "stream": f"{endpoint.base_url}/stream?tokens={mix.stream_tokens}&pace={mix.stream_pace}",
    }[record.kind]
    abort_after = None
    if record.kind == "stream" and mix.client_abort_every and serial % mix.client_abort_every == 0:
        abort_after = mix.stream_tokens // 2
    try:
        async with session.get(url, headers={"X-Request-ID": record.id}) as response:
            record.status = response.status
            record.instance = response.headers.get("X-Served-By", endpoint.name)
            if response.status == 503 and "Retry-After" in response.headers:
                record.outcome = "refused-with-retry"
                return
            if response.status != 200:
                record.outcome, record.error = "failed", f"HTTP {response.status}"
                return
            record.admitted_by.append(record.instance)
            if record.kind == "stream":
                await _read_stream(response, record, abort_after)
            else:
                body = await response.read()
                record.bytes += len(body)
                json.loads(body)  # a cut body does not parse
                record.outcome = "completed"
    except aiohttp.ClientConnectorError as exc:
        record.outcome, record.error = "unavailable", str(exc)
    except (aiohttp.ClientError, ValueError) as exc:
        # After the status line: the answer was cut. Before it: the request was lost.
        record.outcome = "truncated" if record.status is not None else "lost"
        record.error = f"{type(exc).__name__}: {exc}"


async def _read_stream(
    response: aiohttp.ClientResponse, record: RequestRecord, abort_after: int | None
) -> None:
    tokens = 0
    event = None
    async for raw in response.content:
        record.bytes += len(raw)
        line = raw.decode(errors="replace").rstrip("\r\n")
        if line.startswith("event:"):
            event = line.partition(":")[2].strip()
        elif line.startswith("data:") and event == "token":
            tokens += 1
            if abort_after is not None and tokens >= abort_after:
                record.outcome = "client-aborted"
                response.close()
                return
        elif line.startswith("data:") and event == "done":
            record.done_frame = True
        elif line.startswith("data:") and event == "cut":
            record.error = "stream cut at the server's drain deadline"
    record.outcome = "completed" if record.done_frame else "truncated"
    if not record.done_frame and record.error is None:
        record.error = f"stream ended after {tokens} tokens without its done frame"
