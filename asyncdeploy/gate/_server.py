"""The gate: the kit's health paths and admission in front of an engine it cannot change.

Each client connection is a protocol of :mod:`._client`; each admitted request is counted in
flight by the kit's :class:`~asyncdeploy.workload.DrainController` from its head until the last
byte of the answer was written (or the client left, or the drain deadline cut it). The engine's
own health path is checked in the background: the gate is ready only while the kit says
SERVING *and* the engine answers it, and the first answer is what marks the gate started (the
model is loaded). The drain and every other control are on the admin port (:mod:`._admin`);
the data port answers the health paths and the metrics, read-only, refuses the kit's ``/-/``
control paths and relays everything else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from asyncdeploy.workload import (
    METRICS_CONTENT_TYPE,
    DrainController,
    DrainState,
    HealthPaths,
    render_metrics,
)

from ._admin import CONTROL_PREFIX, AdminHost
from ._client import ClientConnection, LocalAnswer
from ._exchange import Exchange
from ._http import answer, status_of
from ._limits import ADMIN_CONNECTIONS, Limits
from ._reader import Reader
from ._upstream import UpstreamConnection

__all__ = ["GateConfig", "serve_gate"]

logger = logging.getLogger("asyncdeploy.gate")


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
    #: the drain hook's ``propagation_wait`` may shorten it for one drain.
    propagation_wait: float = 10.0
    retry_after: int = 5
    paths: HealthPaths = attrs.field(factory=HealthPaths)
    metrics_path: str | None = "/-/metrics"
    #: The admin port (the drain hook, the kit's control commands); None: no admin port.
    admin_port: int | None = None
    #: The token every admin request must carry; None: the admin port listens on loopback only.
    admin_token: str | None = None
    #: Where the admin port listens (default: every address with a token, else 127.0.0.1).
    admin_host: str | None = None
    #: Header and idle timeouts, the connection cap.
    limits: Limits = attrs.field(factory=Limits)


class _Gate:
    """The gate's state and what it answers itself (the relay is :mod:`._client`'s)."""

    def __init__(self, config: GateConfig, controller: DrainController) -> None:
        self.config = config
        self.controller = controller
        self.limits = config.limits
        self.upstream_healthy = False
        self.connections: set[ClientConnection] = set()
        self._task_group: TaskGroup | None = None
        self._admin_connections: set[ClientConnection] = set()
        paths = config.paths
        self._local: dict[bytes, Callable[[Exchange], LocalAnswer]] = {
            p.encode(): handler
            for p, handler in (
                (paths.ready, self._ready),
                (paths.live, self._live),
                (paths.startup, self._startup),
                (config.metrics_path, self._metrics),
            )
            if p is not None
        }

    # --- what the relay needs (``_host.RelayHost``) --------------------------------------------
    def local(self, exchange: Exchange) -> LocalAnswer | None:
        path = exchange.path
        handler = self._local.get(path)
        if handler is None:
            if path.startswith(CONTROL_PREFIX):  # the kit's controls: the admin port's
                body = {"error": "control paths are served on the gate's admin port only"}
                return answer(403, body, close=not exchange.keep_alive, method=exchange.method)
            return None
        if exchange.method not in (b"GET", b"HEAD", b"POST"):
            return None
        return handler(exchange)

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
        self, status: int, body: object, *, close: bool = False, method: bytes = b"GET"
    ) -> bytes:
        return answer(status, body, close=close, method=method)

    def refusal(self, *, close: bool) -> bytes:
        state = self.controller.state.value
        body = {"error": state, "retry_after": self.config.retry_after}
        retry = b"retry-after: %d\r\n" % self.config.retry_after
        return answer(503, body, close=close, extra=retry)

    # --- the gate's own tasks -------------------------------------------------------------------
    async def run(self, task_group: TaskGroup, admin: set[ClientConnection]) -> None:
        self._task_group = task_group
        self._admin_connections = admin
        task_group.start_soon(self.watch_upstream)
        task_group.start_soon(self.watch_cut)
        task_group.start_soon(self.watch_timeouts)

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
                    return 200 <= status_of(raw) < 400
            except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, ValueError):
                return False
        return False

    async def watch_cut(self) -> None:
        """At the drain deadline, cut every exchange still open."""
        await self.controller.draining.wait()
        reason = await self.controller.wait_cut()
        for connection in list(self.connections):
            connection.cut()
        logger.warning("open exchanges cut: %s", reason)

    async def watch_timeouts(self) -> None:
        """Close connections whose head did not arrive in time (408) or that idled too long (a
        sweep: cheaper than a timer armed and cancelled for every request)."""
        limits = self.limits
        every = min(max(min(limits.header_timeout, limits.idle_timeout) / 4, 0.02), 5.0)
        while True:
            await anyio.sleep(every)
            now = time.monotonic()
            for connection in [*self.connections, *self._admin_connections]:
                connection.check_timeouts(now, limits)

    def close_all(self, admin: set[ClientConnection]) -> None:
        for connection in [*self.connections, *admin]:
            upstream = connection.upstream
            if upstream is not None:
                upstream.abort()
            if connection.transport is not None:
                connection.transport.abort()

    # --- what the gate answers itself -------------------------------------------------------
    def _probe(self, exchange: Exchange, ok: bool) -> bytes:
        controller = self.controller
        body = {
            "ok": ok,
            "state": controller.state.value,
            "in_flight": controller.in_flight,
            "engine": self.upstream_healthy,
        }
        close = not exchange.keep_alive
        return answer(200 if ok else 503, body, close=close, method=exchange.method)

    def _ready(self, exchange: Exchange) -> bytes:
        # check_ready() also tells the kit a balancer saw the drain (the window may close)
        ok = self.controller.check_ready() and self.upstream_healthy
        return self._probe(exchange, ok)

    def _live(self, exchange: Exchange) -> bytes:
        return self._probe(exchange, self.controller.broken_reason is None)

    def _startup(self, exchange: Exchange) -> bytes:
        return self._probe(exchange, self.controller.state is not DrainState.STARTING)

    def _metrics(self, exchange: Exchange) -> bytes:
        text = render_metrics(self.controller).encode()
        return answer(
            200,
            text,
            content_type=METRICS_CONTENT_TYPE,
            close=not exchange.keep_alive,
            method=exchange.method,
        )


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
    servers = [
        await loop.create_server(
            lambda: ClientConnection(gate), config.listen_host, config.listen_port, backlog=1024
        )
    ]
    admin_limits = attrs.evolve(config.limits, max_connections=ADMIN_CONNECTIONS)
    admin = AdminHost(gate, config.admin_token, admin_limits)
    try:
        if config.admin_port is not None:
            host = config.admin_host or ("0.0.0.0" if config.admin_token else "127.0.0.1")
            servers.append(
                await loop.create_server(lambda: ClientConnection(admin), host, config.admin_port)
            )
        async with anyio.create_task_group() as tg:
            await gate.run(tg, admin.connections)
            task_status.started(servers[0].sockets[0].getsockname()[1])
            await anyio.sleep_forever()
    finally:
        for server in servers:
            server.close()
        gate.close_all(admin.connections)
