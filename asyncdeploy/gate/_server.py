"""The gate: HAProxy carries the bytes; this process is its controller.

The controller starts HAProxy (:mod:`._process`) on the listening sockets it bound itself
(passed as descriptors: a port taken is this process's error, and port 0 works), answers the
kit's health paths and metrics and the admin port's commands on unix sockets HAProxy forwards
them to (:mod:`._local`, :mod:`._admin`), checks the engine's own health path, and drives the
kit's state machine: admission is the ``admit`` key of HAProxy's map, set from the kit's
``accepting`` on every change and every tick; in flight is read from HAProxy's counters
(:mod:`._counting`); at the drain deadline the engine backend's streams are shut.

Ready = the kit SERVING *and* the engine's health path answering; the first answer marks the
gate started (the model is loaded). Drained = the kit drained (window closed, nothing in
flight) *and* a read of HAProxy's counters after admission was turned off that shows nothing
open on the engine backend.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import time

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from asyncdeploy.workload import (
    METRICS_CONTENT_TYPE,
    DrainController,
    DrainState,
    HealthPaths,
    RequestOutcome,
    render_metrics,
)

from ._admin import AdminHost
from ._counting import INTERVAL, InFlight
from ._haproxy import (
    DATA_FRONTEND,
    GRPC_HEALTH_PATH,
    GRPC_WATCH_PATH,
    WATCH_BACKEND,
    Plane,
    engine_backends,
)
from ._http import answer, grpc_health_answer, grpc_health_watch_start, status_of
from ._limits import Limits, connections
from ._local import Held, LocalAnswer, LocalHandler, Request, serve_local
from ._process import DataPlaneError, Process, find_haproxy, run_dir, running_haproxy
from ._reader import Reader
from ._runtime import Runtime, RuntimeAPIError

__all__ = ["GateConfig", "serve_gate"]

logger = logging.getLogger("asyncdeploy.gate")


@attrs.frozen(kw_only=True)
class GateConfig:
    """Where the gate listens, where the engine is, and how the engine's health is read."""

    listen_port: int
    upstream_port: int
    listen_host: str = "0.0.0.0"
    upstream_host: str = "127.0.0.1"
    #: What the engine speaks: ``http1`` or ``h2c`` (HTTP/2 without TLS, gRPC's transport).
    upstream_protocol: str = "http1"
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
    #: Timeouts and the connection cap (HAProxy's settings: docs/gate.md has the table).
    limits: Limits = attrs.field(factory=Limits)
    #: The HAProxy binary (None: on PATH, else /usr/sbin/haproxy).
    haproxy: str | None = None


def _listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


class _Gate:
    """The controller's state: the kit's machine, HAProxy's runtime, the engine's health."""

    def __init__(
        self,
        config: GateConfig,
        controller: DrainController,
        runtime: Runtime,
        backends: tuple[str, ...],
    ) -> None:
        self.config = config
        self.controller = controller
        self.runtime = runtime
        self.backends = backends  # the data plane's backends to the engine
        self.in_flight = InFlight(controller, runtime, backends)
        self.upstream_healthy = False
        self._applied: tuple[bool, str] | None = None
        self._goaway_sent = False
        self._map_lock = anyio.Lock()
        self._task_group: TaskGroup | None = None
        paths = config.paths
        self._local: dict[bytes, LocalHandler] = {
            p.encode(): handler
            for p, handler in (
                (paths.ready, self._ready),
                (paths.live, self._live),
                (paths.startup, self._startup),
                (config.metrics_path, self._metrics),
            )
            if p is not None
        }
        if config.upstream_protocol == "h2c":  # HAProxy sends them here once the drain began
            self._local[GRPC_HEALTH_PATH.encode()] = self._grpc_health
            self._local[GRPC_WATCH_PATH.encode()] = self._grpc_watch
        self._watches_shut = False

    # --- admission and counting -----------------------------------------------------------------
    async def apply_admission(self) -> None:
        """Set HAProxy's map from the kit: relay while it accepts, refuse (with its state) after."""
        controller = self.controller
        async with self._map_lock:
            wanted = (controller.accepting, controller.state.value)
            if wanted != self._applied:
                admit, state = wanted
                if not admit and self.controller.draining.is_set():
                    await self._goaway()
                await self.runtime.set_map("state", state)
                await self.runtime.set_map("admit", "1" if admit else "0")
                self._applied = wanted
                logger.debug("haproxy admission: admit=%d state=%s", admit, state)
            if self.controller.draining.is_set():  # once the map says so (a no-op after)
                await self._shut_watches()

    async def _goaway(self) -> None:
        """An h2c gate's refusal: gRPC clients hold one connection and open streams on it; a
        503 per new stream is UNAVAILABLE, which they retry only under a retry policy, while a
        GOAWAY moves their new calls to another address before a stream is sent, the streams
        in flight running on. HAProxy sends it once its data frontend is shut, on each
        connection's next event (measured: docs/gate.md, "HTTP/2 and gRPC"): an HTTP/2 stream
        that arrives after is one its client sent before it read the GOAWAY, relayed
        (``goaway`` in the map); HTTP/1.1 requests get the 503s."""
        if self.config.upstream_protocol != "h2c" or self._goaway_sent:
            return
        self._goaway_sent = True
        try:  # admission is still on: nothing arriving in between is refused
            await self.runtime.stop_frontend(DATA_FRONTEND)
        except RuntimeAPIError as exc:  # the 503s still refuse: logged, not fatal
            logger.warning("GOAWAY to the data port's clients: %s", exc)
            return
        await self.runtime.set_map("goaway", "1")
        logger.info("window closed: data port shut, GOAWAY sent to its HTTP/2 clients")

    async def _shut_watches(self) -> None:
        """At the drain's start (the map says draining: a Watch opened again is the gate's),
        shut the engine's health Watch streams, which would say SERVING for as long as their
        clients hold them."""
        if self.config.upstream_protocol != "h2c" or self._watches_shut:
            return
        try:
            await self.runtime.cut(WATCH_BACKEND, "e")
        except RuntimeAPIError as exc:  # tried again at the next admission read
            logger.warning("shutting the engine's health watches: %s", exc)
            return
        self._watches_shut = True

    async def sync(self) -> None:
        await self.apply_admission()
        await self.in_flight.read()

    async def wait_drained(self, timeout: float | None) -> bool:
        """The kit drained *and* HAProxy, read after admission was turned off, holds nothing."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        controller = self.controller
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await controller.wait_drained(remaining):
                return False
            await self.sync()
            if controller.is_drained and self.in_flight.current == 0:
                return True
            await anyio.sleep(min(INTERVAL, max(0.0, deadline - time.monotonic())))

    # --- the controller's own tasks ---------------------------------------------------------------
    async def watch_counters(self) -> None:
        while True:
            try:
                await self.sync()
            except RuntimeAPIError as exc:
                logger.warning("haproxy's runtime API: %s", exc)
            await anyio.sleep(INTERVAL)

    async def watch_upstream(self) -> None:
        controller = self.controller
        while True:
            self.upstream_healthy = await self.check_upstream()
            if self.upstream_healthy and controller.state is DrainState.STARTING:
                # HAProxy admits first, then the kit says SERVING: whoever sees the gate
                # serving finds it relaying (the other order would refuse for one flip)
                async with self._map_lock:
                    await self.runtime.set_map("state", DrainState.SERVING.value)
                    await self.runtime.set_map("admit", "1")
                    if controller.mark_started():
                        logger.info("engine answers its health check: serving")
                        self._applied = None
                await self.apply_admission()
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
        """At the drain deadline, shut every stream still open on the engine backends."""
        await self.controller.draining.wait()
        reason = await self.controller.wait_cut()
        self.in_flight.release_all(RequestOutcome.CUT_AT_DEADLINE)
        for backend in self.backends:
            await self.runtime.cut(backend, "e")
        logger.warning("open exchanges cut: %s", reason)

    async def watch_window(self) -> None:
        """Refuse the moment the kit's window closes (not at the next tick)."""
        await self.controller.draining.wait()
        await self.controller.wait_window_closed()
        await self.apply_admission()

    async def watch_process(self, process: Process) -> None:
        code = await process.wait()
        raise DataPlaneError(f"haproxy exited with code {code} while the gate ran")

    async def watch_signals(self, task_group: TaskGroup) -> None:
        """SIGTERM/SIGINT: drain (admitted work finishes, bounded by the drain timeout), stop."""
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        controller = self.controller
        controller.begin_drain()
        await self.wait_drained(controller.drain_timeout)
        controller.mark_stopped()
        task_group.cancel_scope.cancel()

    # --- what the controller answers itself (HAProxy forwards the data port's health paths) ---
    def local(self, request: Request) -> LocalAnswer:
        handler = self._local.get(request.path)
        if handler is None:  # HAProxy forwards only the paths above
            return answer(404, {"error": "not a gate path"}, close=True, method=request.method)
        return handler(request)

    def answer(
        self, status: int, body: object, *, close: bool = True, method: bytes = b"GET"
    ) -> bytes:
        return answer(status, body, close=True, method=method)

    def _probe(self, request: Request, ok: bool) -> bytes:
        controller = self.controller
        body = {
            "ok": ok,
            "state": controller.state.value,
            "in_flight": controller.in_flight,
            "engine": self.upstream_healthy,
        }
        return answer(200 if ok else 503, body, close=True, method=request.method)

    def _ready(self, request: Request) -> bytes:
        # check_ready() also tells the kit a balancer saw the drain (the window may close)
        ok = self.controller.check_ready() and self.upstream_healthy
        return self._probe(request, ok)

    def _live(self, request: Request) -> bytes:
        return self._probe(request, self.controller.broken_reason is None)

    def _startup(self, request: Request) -> bytes:
        return self._probe(request, self.controller.state is not DrainState.STARTING)

    def _grpc_health(self, request: Request) -> bytes:
        serving = self.controller.state is DrainState.SERVING
        return grpc_health_answer(serving)

    def _grpc_watch(self, request: Request) -> Held:
        return Held(grpc_health_watch_start(self.controller.state is DrainState.SERVING))

    def _metrics(self, request: Request) -> bytes:
        text = render_metrics(self.controller).encode()
        return answer(
            200, text, content_type=METRICS_CONTENT_TYPE, close=True, method=request.method
        )


async def serve_gate(
    config: GateConfig,
    controller: DrainController,
    *,
    handle_signals: bool = False,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or, with ``handle_signals``, drained after SIGTERM/SIGINT);
    ``task_status.started`` gets the data port listened on, once HAProxy listens."""
    binary = find_haproxy(config.haproxy)
    limits = config.limits
    data = _listener(config.listen_host, config.listen_port)
    admin_host = config.admin_host or ("0.0.0.0" if config.admin_token else "127.0.0.1")
    admin = _listener(admin_host, config.admin_port) if config.admin_port is not None else None
    sockets = [s for s in (data, admin) if s is not None]
    data_port = int(data.getsockname()[1])
    try:
        async with run_dir() as directory:
            plane = Plane(
                run_dir=directory,
                data_fd=data.fileno(),
                admin_fd=None if admin is None else admin.fileno(),
                upstream_host=config.upstream_host,
                upstream_port=config.upstream_port,
                upstream_protocol=config.upstream_protocol,
                admin_token=config.admin_token,
                connections=connections(limits.max_connections),
                header_timeout=limits.header_timeout,
                idle_timeout=limits.idle_timeout,
                engine_timeout=limits.engine_timeout,
                tunnel_timeout=limits.tunnel_timeout,
                retry_after=config.retry_after,
                local_paths=tuple(
                    p
                    for p in (*attrs.astuple(config.paths), config.metrics_path)
                    if isinstance(p, str)
                ),
            )
            runtime = Runtime(plane.runtime_socket, plane.map_file)
            gate = _Gate(config, controller, runtime, engine_backends(plane))
            host = AdminHost(gate, config.admin_token)
            async with anyio.create_task_group() as tg:
                await tg.start(serve_local, plane.local_socket, gate.local)
                if admin is not None:
                    await tg.start(serve_local, plane.admin_socket, host.local)
                async with running_haproxy(binary, plane) as (process, _):
                    for s in sockets:  # HAProxy holds them now
                        s.close()
                    tg.start_soon(gate.watch_process, process)
                    tg.start_soon(gate.watch_upstream)
                    tg.start_soon(gate.watch_counters)
                    tg.start_soon(gate.watch_cut)
                    tg.start_soon(gate.watch_window)
                    if handle_signals:
                        tg.start_soon(gate.watch_signals, tg)
                    await gate.apply_admission()
                    task_status.started(data_port)
                    await anyio.sleep_forever()
    finally:
        for s in sockets:
            s.close()
