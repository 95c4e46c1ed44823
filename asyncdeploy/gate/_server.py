"""The gate: the kit's health paths and admission in front of an engine it cannot change.

Each client connection is served by one task; each admitted request is counted in flight by the
kit's :class:`~asyncdeploy.workload.DrainController` from its head until the last byte of the
answer was written (or the client left, or the drain deadline cut it). The engine's own health
path is checked in the background: the gate is ready only while the kit says SERVING *and* the
engine answers it, and the first answer is what marks the gate started (the model is loaded).
``GET /-/drain`` is the preStop hook: it starts the drain, waits until the kit's propagation
window closed (new requests are served through it, then refused) and nothing is in flight, and
answers with the kit's statistics (the propagation observed among them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from urllib.parse import parse_qs

import anyio
import attrs
from anyio.abc import TaskStatus

from asyncdeploy.workload import (
    METRICS_CONTENT_TYPE,
    DrainController,
    DrainState,
    HealthPaths,
    RequestOutcome,
    parse_duration,
    render_metrics,
)

from ._http import HTTPParseError, RequestHead, parse_request_head, parse_response_head
from ._relay import ByteStream, ClientGone, Reader, StreamPair, UpstreamFailed, relay_exchange

__all__ = ["GateConfig", "serve_gate"]

logger = logging.getLogger("asyncdeploy.gate")

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 502: b"Bad Gateway"}
_REASONS |= {503: b"Service Unavailable", 504: b"Gateway Timeout"}


@attrs.frozen(kw_only=True)
class GateConfig:
    """Where the gate listens, where the engine is, and how the engine's health is read."""

    listen_port: int
    upstream_port: int
    listen_host: str = "0.0.0.0"
    upstream_host: str = "127.0.0.1"
    #: The engine's own health path (2xx or 3xx: healthy); None: a TCP connect is the check.
    ready_path: str | None = "/health"
    check_interval: float = 1.0
    check_timeout: float = 1.0
    #: From the drain start until streams still open are cut (None: never).
    drain_timeout: float | None = None
    #: The propagation window's maximum (the kit's ``PropagationWindow``; 0: refuse at once);
    #: ``GET /-/drain?propagation_wait=`` may shorten it for one drain.
    propagation_wait: float = 10.0
    retry_after: int = 5
    paths: HealthPaths = attrs.field(factory=HealthPaths)
    drain_path: str = "/-/drain"
    metrics_path: str | None = "/-/metrics"
    #: A keep-alive connection idle this long between requests is closed.
    idle_timeout: float = 300.0


class _Connection:
    __slots__ = ("busy", "cut", "scope")

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.busy = False
        self.cut = False


class _Gate:
    def __init__(self, config: GateConfig, controller: DrainController) -> None:
        self.config = config
        self.controller = controller
        self.upstream_healthy = False
        self.connections: set[_Connection] = set()
        paths = config.paths
        self.local = {
            p.encode(): handler
            for p, handler in (
                (paths.ready, self._ready),
                (paths.live, self._live),
                (paths.startup, self._startup),
                (config.drain_path, self._drain),
                (config.metrics_path, self._metrics),
            )
            if p is not None
        }

    # --- the engine's health ------------------------------------------------------------------
    async def watch_upstream(self) -> None:
        while True:
            self.upstream_healthy = await self.check_upstream()
            if self.upstream_healthy and self.controller.mark_started():
                logger.info("engine answers its health check: serving")
            await anyio.sleep(self.config.check_interval)

    async def check_upstream(self) -> bool:
        config = self.config
        with anyio.move_on_after(config.check_timeout):
            try:
                async with await anyio.connect_tcp(config.upstream_host, config.upstream_port) as s:
                    if config.ready_path is None:
                        return True
                    await s.send(
                        b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                        % (
                            config.ready_path.encode(),
                            config.upstream_host.encode(),
                            config.upstream_port,
                        )
                    )
                    raw = await Reader(s).head()
                    if raw is None:
                        return False
                    return 200 <= parse_response_head(raw).status < 400
            except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, HTTPParseError):
                return False
        return False

    async def watch_cut(self) -> None:
        """At the drain deadline, cut every exchange still open."""
        await self.controller.draining.wait()
        reason = await self.controller.wait_cut()
        for connection in list(self.connections):
            if connection.busy:
                connection.cut = True
                connection.scope.cancel()
        logger.warning("open exchanges cut: %s", reason)

    # --- one client connection --------------------------------------------------------------
    async def serve_connection(self, client: ByteStream) -> None:
        with anyio.CancelScope() as scope:
            connection = _Connection(scope)
            self.connections.add(connection)
            try:
                await self._requests(client, connection)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                self.connections.discard(connection)
                await client.aclose()

    async def _requests(self, client: ByteStream, connection: _Connection) -> None:
        reader = Reader(client)
        upstream: Reader | None = None
        try:
            while True:
                # The connection's own scope ends an idle one: cheaper than a scope per request.
                connection.scope.deadline = anyio.current_time() + self.config.idle_timeout
                try:
                    raw = await reader.head()
                except HTTPParseError:
                    await self._answer(client, 400, {"error": "bad request"}, close=True)
                    return
                connection.scope.deadline = math.inf
                if raw is None:
                    return
                try:
                    head = parse_request_head(raw)
                except HTTPParseError as exc:
                    await self._answer(client, 400, {"error": str(exc)}, close=True)
                    return
                local = self.local.get(head.path)
                if local is not None and head.method in (b"GET", b"HEAD", b"POST"):
                    await local(client, head)
                    if not head.keep_alive or head.length or head.body.value == "chunked":
                        return
                    continue
                admission = self.controller.try_admit()
                if admission is None:
                    await self._refuse(client)
                    return
                connection.busy = True
                outcome = RequestOutcome.FAILED
                try:
                    keep, upstream = await self._forward(head, reader, client, upstream)
                    outcome = RequestOutcome.COMPLETED
                except ClientGone:
                    outcome = RequestOutcome.CLIENT_DISCONNECTED
                    return
                except UpstreamFailed as exc:
                    logger.warning("engine failed %s %s: %s", head.method, head.path, exc)
                    if not exc.answered:
                        await self._answer(client, 502, {"error": "engine unreachable"}, close=True)
                    return
                finally:
                    connection.busy = False
                    if connection.cut:
                        outcome = RequestOutcome.CUT_AT_DEADLINE
                    admission.release(outcome)
                if not keep:
                    return
        finally:
            if upstream is not None:
                with anyio.CancelScope(shield=True):
                    await upstream.stream.aclose()

    async def _forward(
        self, head: RequestHead, reader: Reader, client: ByteStream, upstream: Reader | None
    ) -> tuple[bool, Reader | None]:
        """Relay one exchange on the connection's upstream connection, opened when needed."""
        close_after = self.controller.state is not DrainState.SERVING
        reused = upstream is not None
        if upstream is None:
            upstream = await self._connect_upstream()
        try:
            keep, reusable = await relay_exchange(
                head, reader, client, upstream, close_after=close_after
            )
        except UpstreamFailed as exc:
            await upstream.stream.aclose()
            # A kept-alive connection the engine closed while idle: try once more on a new one
            # (nothing of this request reached the engine's app, nothing reached the client).
            if not (reused and not exc.answered and head.body.value == "none"):
                raise
            upstream = await self._connect_upstream()
            keep, reusable = await relay_exchange(
                head, reader, client, upstream, close_after=close_after
            )
        if not reusable:
            await upstream.stream.aclose()
            return keep, None
        return keep, upstream

    async def _connect_upstream(self) -> Reader:
        config = self.config
        try:
            return Reader(await StreamPair.connect(config.upstream_host, config.upstream_port))
        except OSError as exc:
            raise UpstreamFailed(f"cannot connect: {exc}", answered=False) from exc

    # --- what the gate answers itself -------------------------------------------------------
    async def _answer(
        self,
        client: ByteStream,
        status: int,
        body: object,
        *,
        close: bool = False,
        content_type: bytes = b"application/json",
        extra: bytes = b"",
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n" % (
            status,
            _REASONS.get(status, b"Unknown"),
            content_type,
            len(data),
            extra,
            b"connection: close\r\n" if close else b"",
        )
        await client.send(head + data)

    async def _refuse(self, client: ByteStream) -> None:
        state = self.controller.state.value
        body = {"error": state, "retry_after": self.config.retry_after}
        retry = b"retry-after: %d\r\n" % self.config.retry_after
        await self._answer(client, 503, body, close=True, extra=retry)

    def _probe_body(self, ok: bool) -> dict[str, object]:
        controller = self.controller
        return {
            "ok": ok,
            "state": controller.state.value,
            "in_flight": controller.in_flight,
            "engine": self.upstream_healthy,
        }

    async def _probe(self, client: ByteStream, head: RequestHead, ok: bool) -> None:
        close = not head.keep_alive
        await self._answer(client, 200 if ok else 503, self._probe_body(ok), close=close)

    async def _ready(self, client: ByteStream, head: RequestHead) -> None:
        controller = self.controller
        # check_ready() also tells the kit a balancer saw the drain (the window may close)
        ok = controller.check_ready() and self.upstream_healthy
        await self._probe(client, head, ok)

    async def _live(self, client: ByteStream, head: RequestHead) -> None:
        await self._probe(client, head, self.controller.broken_reason is None)

    async def _startup(self, client: ByteStream, head: RequestHead) -> None:
        await self._probe(client, head, self.controller.state is not DrainState.STARTING)

    async def _metrics(self, client: ByteStream, head: RequestHead) -> None:
        text = render_metrics(self.controller).encode()
        await self._answer(client, 200, text, content_type=METRICS_CONTENT_TYPE)

    async def _drain(self, client: ByteStream, head: RequestHead) -> None:
        """The preStop hook: drain; answer once the window closed and nothing is in flight."""
        try:
            query = parse_qs(head.query.decode("latin-1"), strict_parsing=False)
            wait = _seconds(query, "propagation_wait", None)
            timeout = _seconds(query, "timeout", None)
        except ValueError as exc:
            await self._answer(client, 400, {"error": str(exc)}, close=True)
            return
        started = time.monotonic()
        # The kit serves new requests through the propagation window (at most ``wait``: this
        # hook's own bound), then refuses them; drained = window closed and nothing in flight.
        self.controller.begin_drain(timeout=self.config.drain_timeout, propagation=wait)
        drained = await self.controller.wait_drained(timeout)
        report = {
            "drained": drained,
            "seconds": round(time.monotonic() - started, 3),
            "statistics": self.controller.statistics().to_dict(),
        }
        await self._answer(client, 200 if drained else 504, report, close=not head.keep_alive)


def _seconds(query: dict[str, list[str]], key: str, default: float | None) -> float | None:
    values = query.get(key)
    if not values:
        return default
    return parse_duration(values[-1])


async def serve_gate(
    config: GateConfig,
    controller: DrainController,
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started`` gets the port listened on."""
    gate = _Gate(config, controller)
    accepted, incoming = anyio.create_memory_object_stream[StreamPair](math.inf)

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # asyncio's own server would start a task of its own per connection: hand the streams
        # to the task group instead, so every connection's task is ours to cancel and await.
        try:
            accepted.send_nowait(StreamPair(reader, writer))
        except anyio.ClosedResourceError:
            writer.close()

    server = await asyncio.start_server(
        on_connect, config.listen_host, config.listen_port, limit=65536, backlog=1024
    )
    try:
        async with accepted, incoming, anyio.create_task_group() as tg:
            tg.start_soon(gate.watch_upstream)
            tg.start_soon(gate.watch_cut)
            task_status.started(server.sockets[0].getsockname()[1])
            async for client in incoming:
                tg.start_soon(gate.serve_connection, client)
    finally:
        server.close()
