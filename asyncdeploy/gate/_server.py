"""The gate: the kit's health paths and admission in front of an engine it cannot change.

Each client connection is a protocol of :mod:`._relay`; each admitted request is counted in flight
by the kit's :class:`~asyncdeploy.workload.DrainController` from its head until the last byte of the
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
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from asyncdeploy.workload import (
    METRICS_CONTENT_TYPE,
    DrainController,
    DrainState,
    HealthPaths,
    parse_duration,
    render_metrics,
)

from ._http import HTTPParseError, RequestHead, parse_response_head
from ._reader import Reader
from ._relay import IDLE, ClientConnection, LocalAnswer
from ._upstream import UpstreamConnection

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


class _Gate:
    """The gate's state and what it answers itself (the relay is :mod:`._relay`'s)."""

    def __init__(self, config: GateConfig, controller: DrainController) -> None:
        self.config = config
        self.controller = controller
        self.upstream_healthy = False
        self.connections: set[ClientConnection] = set()
        self._task_group: TaskGroup | None = None
        paths = config.paths
        self._local: dict[bytes, Callable[[RequestHead], LocalAnswer]] = {
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

    # --- what the relay needs (``_relay.RelayHost``) -----------------------------------------------
    def local(self, head: RequestHead) -> LocalAnswer | None:
        handler = self._local.get(head.path)
        if handler is None or head.method not in (b"GET", b"HEAD", b"POST"):
            return None
        return handler(head)

    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self._task_group is not None
        self._task_group.start_soon(function, *args)

    async def connect_upstream(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        config = self.config
        _, upstream = await loop.create_connection(
            UpstreamConnection, config.upstream_host, config.upstream_port
        )
        return upstream

    def answer(
        self,
        status: int,
        body: object,
        *,
        close: bool = False,
        content_type: bytes = b"application/json",
        extra: bytes = b"",
    ) -> bytes:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n" % (
            status,
            _REASONS.get(status, b"Unknown"),
            content_type,
            len(data),
            extra,
            b"connection: close\r\n" if close else b"",
        )
        return head + data

    def refusal(self) -> bytes:
        state = self.controller.state.value
        body = {"error": state, "retry_after": self.config.retry_after}
        retry = b"retry-after: %d\r\n" % self.config.retry_after
        return self.answer(503, body, close=True, extra=retry)

    # --- the gate's own tasks -------------------------------------------------------------------
    async def run(self, task_group: TaskGroup) -> None:
        self._task_group = task_group
        task_group.start_soon(self.watch_upstream)
        task_group.start_soon(self.watch_cut)
        task_group.start_soon(self.watch_idle)

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
            connection.cut()
        logger.warning("open exchanges cut: %s", reason)

    async def watch_idle(self) -> None:
        """Close connections that waited longer than ``idle_timeout`` for a request head (a
        sweep: cheaper than a timer armed and cancelled for every request)."""
        timeout = self.config.idle_timeout
        while True:
            await anyio.sleep(min(max(timeout / 10, 0.01), 10.0))
            now = time.monotonic()
            for connection in list(self.connections):
                if connection.phase == IDLE and now - connection.idle_since > timeout:
                    connection.close()

    def close_all(self) -> None:
        for connection in list(self.connections):
            upstream = connection.upstream
            if upstream is not None:
                upstream.abort()
            if connection.transport is not None:
                connection.transport.abort()

    # --- what the gate answers itself -------------------------------------------------------
    def _probe_body(self, ok: bool) -> dict[str, object]:
        controller = self.controller
        return {
            "ok": ok,
            "state": controller.state.value,
            "in_flight": controller.in_flight,
            "engine": self.upstream_healthy,
        }

    def _probe(self, head: RequestHead, ok: bool) -> bytes:
        return self.answer(200 if ok else 503, self._probe_body(ok), close=not head.keep_alive)

    def _ready(self, head: RequestHead) -> bytes:
        # check_ready() also tells the kit a balancer saw the drain (the window may close)
        ok = self.controller.check_ready() and self.upstream_healthy
        return self._probe(head, ok)

    def _live(self, head: RequestHead) -> bytes:
        return self._probe(head, self.controller.broken_reason is None)

    def _startup(self, head: RequestHead) -> bytes:
        return self._probe(head, self.controller.state is not DrainState.STARTING)

    def _metrics(self, head: RequestHead) -> bytes:
        text = render_metrics(self.controller).encode()
        return self.answer(200, text, content_type=METRICS_CONTENT_TYPE)

    def _drain(self, head: RequestHead) -> LocalAnswer:
        """The preStop hook: drain; answer once the window closed and nothing is in flight."""
        try:
            query = parse_qs(head.query.decode("latin-1"), strict_parsing=False)
            wait = _seconds(query, "propagation_wait", None)
            timeout = _seconds(query, "timeout", None)
        except ValueError as exc:
            return self.answer(400, {"error": str(exc)}, close=True)

        async def drain() -> bytes:
            started = time.monotonic()
            # The kit serves new requests through the propagation window (at most ``wait``:
            # this hook's own bound), then refuses them; drained = window closed and nothing
            # in flight.
            self.controller.begin_drain(timeout=self.config.drain_timeout, propagation=wait)
            drained = await self.controller.wait_drained(timeout)
            report = {
                "drained": drained,
                "seconds": round(time.monotonic() - started, 3),
                "statistics": self.controller.statistics().to_dict(),
            }
            return self.answer(200 if drained else 504, report, close=not head.keep_alive)

        return drain


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
    """Serve until cancelled; ``task_status.started`` gets the port listened on.

    Runs on any asyncio event loop (uvloop's too: ``python3 -m asyncdeploy.gate`` uses it when
    installed); the relay is callbacks on the loop, its few tasks are this call's children.
    """
    gate = _Gate(config, controller)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ClientConnection(gate), config.listen_host, config.listen_port, backlog=1024
    )
    try:
        async with anyio.create_task_group() as tg:
            await gate.run(tg)
            task_status.started(server.sockets[0].getsockname()[1])
            await anyio.sleep_forever()
    finally:
        server.close()
        gate.close_all()
