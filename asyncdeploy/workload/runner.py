"""Run an ASGI app under uvicorn with the drain kit in charge of termination.

uvicorn reacts to SIGTERM by closing its listener at once and waiting for open responses; it
never answers 503 nor flips readiness. Here uvicorn's own handlers are disabled and the order
is: signal (or control socket) → DRAINING (503 for new work, readiness fails) → in-flight
reaches zero, or the drain deadline cuts the rest → only then uvicorn is told to exit.

Needs uvicorn (the ``demo`` extra); the rest of :mod:`asyncdeploy.workload` does not.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Generator
from typing import Any, Literal

import anyio
import attrs
import uvicorn
from anyio.abc import TaskStatus
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._asgi import PIPELINED_EXTENSION, ASGIApp, Receive, Scope, Send
from .control import serve_control_socket
from .errors import WorkloadError
from .middleware import DrainMiddleware
from .signals import RepeatedSigterm, TerminationRequest, install_sigterm_handler
from .state import DrainController, DrainStatistics

__all__ = ["ServeOptions", "ServerAddress", "serve_with_drain"]

logger = logging.getLogger("asyncdeploy.workload")

#: Past the middleware's cut-frame timeout, for the task to notice the cut and release.
_CUT_MARGIN = 0.5


@attrs.frozen(kw_only=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    #: Unix control socket path (``drain`` / ``status``); None: no socket.
    control_socket: str | None = None
    #: Install SIGTERM/SIGINT handlers: only from a process's entry point (main thread).
    handle_signals: bool = False
    #: Negative control: SIGTERM is ignored, no drain happens (SIGINT still drains).
    ignore_sigterm: bool = False
    #: A SIGTERM during a drain: "ignore" (logged; an engine's retried stop must not cut
    #: streams) or "cut" every open stream at once. A second SIGINT always cuts.
    repeated_sigterm: RepeatedSigterm = "ignore"
    #: Extra time after the drain deadline for cut frames to be written (at least the
    #: middleware's ``cut_send_timeout`` and a margin).
    cut_grace: float = 2.0
    #: uvicorn's ``timeout_graceful_shutdown`` once drained (idle keep-alive connections).
    shutdown_timeout: int = 5
    lifespan: Literal["auto", "on", "off"] = "auto"
    log_level: str = "info"
    access_log: bool = False


@attrs.frozen(kw_only=True)
class ServerAddress:
    host: str
    port: int


class _PipeliningAwareH11(H11Protocol):
    """uvicorn's h11 protocol, telling the middleware (scope extension
    :data:`PIPELINED_EXTENSION`) whether the client has already sent more requests on this
    connection, so that a drain answers each of them instead of closing in front of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app = self.app

        def requests_queued() -> bool:
            return bool(self.conn.trailing_data[0])

        async def with_extension(scope: Scope, receive: Receive, send: Send) -> None:
            scope.setdefault("extensions", {})[PIPELINED_EXTENSION] = requests_queued
            await app(scope, receive, send)

        self.app = with_extension


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the drain kit owns SIGTERM/SIGINT; uvicorn must not exit on them

    async def shutdown(self, sockets: Any = None) -> None:
        """uvicorn's shutdown, without waiting on clients that stopped reading.

        A connection uvicorn has closed keeps its socket open until its unsent bytes are read
        (asyncio flushes before it closes), and uvicorn waits for it up to its graceful
        timeout, then leaves it open: a client that stopped reading held the exit past the
        drain's deadline by that timeout (5 s), its socket open until the process ended. Such
        a connection is aborted once its bytes stop moving; one still read, however slowly,
        is waited for as before."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(_abort_stalled, self.server_state)
            await super().shutdown(sockets)
            tg.cancel_scope.cancel()
        for connection in list(self.server_state.connections):
            _transport(connection).abort()  # past uvicorn's timeout: nothing is left open


#: How long a closed connection's unsent bytes may stay unread before it is aborted.
_STALLED_AFTER = 1.0


def _transport(connection: Any) -> Any:
    return connection.transport  # uvicorn's protocols keep theirs here (h11 and httptools)


async def _abort_stalled(state: uvicorn.server.ServerState) -> None:
    """Abort each closed connection whose unsent bytes have not moved for ``_STALLED_AFTER``."""
    moved: dict[Any, tuple[int, float]] = {}  # connection: (unsent bytes, when they last moved)
    while True:
        now = anyio.current_time()
        for connection in list(state.connections):
            transport = _transport(connection)
            if not transport.is_closing():
                continue  # still serving: uvicorn's shutdown ends it
            unsent = transport.get_write_buffer_size()
            last = moved.get(connection)
            if last is None or unsent != last[0]:
                moved[connection] = (unsent, now)
            elif unsent and now - last[1] >= _STALLED_AFTER:
                logger.warning(
                    "a client stopped reading: %d bytes unsent, connection aborted", unsent
                )
                transport.abort()
        await anyio.sleep(0.1)


async def serve_with_drain(
    app: ASGIApp,
    controller: DrainController,
    options: ServeOptions = ServeOptions(),
    *,
    termination: TerminationRequest | None = None,
    task_status: TaskStatus[ServerAddress] = anyio.TASK_STATUS_IGNORED,
) -> DrainStatistics:
    """Serve ``app`` (normally a :class:`DrainMiddleware`) until termination, then drain and exit.

    Reports the bound address through ``task_status`` once listening. ``termination`` is
    requested by the signal handlers (with ``handle_signals``) and may be requested by the
    caller. Calling :meth:`DrainController.mark_started` stays the caller's job (model loaded).
    """
    termination = termination or TerminationRequest(
        controller, repeated_sigterm=options.repeated_sigterm
    )
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        http=_PipeliningAwareH11,
        lifespan=options.lifespan,
        timeout_graceful_shutdown=options.shutdown_timeout,
        log_level=options.log_level,
        access_log=options.access_log,
    )
    server = _Server(config)
    try:
        with contextlib.ExitStack() as stack:
            if options.handle_signals:
                signals = (
                    (signal.SIGINT,) if options.ignore_sigterm else (signal.SIGTERM, signal.SIGINT)
                )
                stack.enter_context(
                    install_sigterm_handler(controller, termination=termination, signals=signals)
                )
                if options.ignore_sigterm:
                    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    stack.callback(signal.signal, signal.SIGTERM, previous)
            async with anyio.create_task_group() as tg:
                if options.control_socket is not None:
                    await tg.start(serve_control_socket, controller, options.control_socket)
                serve_done = anyio.Event()
                tg.start_soon(_run_uvicorn, server, serve_done, tg.cancel_scope)
                address = await _wait_started(server, serve_done)
                if address is not None:
                    task_status.started(address)
                    await termination.wait()
                    await _wait_drained_or_deadline(controller, _cut_grace(app, options))
                    server.should_exit = True
    finally:
        controller.mark_stopped()
    if not server.started:
        raise WorkloadError(f"uvicorn could not start on {options.host}:{options.port}")
    return controller.statistics()


def _cut_grace(app: ASGIApp, options: ServeOptions) -> float:
    """Time past the deadline to wait: enough for the middleware's cut frames to be written."""
    if isinstance(app, DrainMiddleware):
        return max(options.cut_grace, app.cut_send_timeout + _CUT_MARGIN)
    return options.cut_grace


async def _run_uvicorn(server: uvicorn.Server, done: anyio.Event, scope: anyio.CancelScope) -> None:
    try:
        await server.serve()
    except SystemExit as exc:  # uvicorn exits this way when it cannot start
        logger.error("uvicorn exited with status %s", exc.code)
    finally:
        done.set()
        scope.cancel()  # the control socket (and anything else) ends with the server


async def _wait_started(server: uvicorn.Server, serve_done: anyio.Event) -> ServerAddress | None:
    while not server.started:  # uvicorn has no "started" event to wait on
        if serve_done.is_set():
            return None
        await anyio.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    logger.info("serving on http://%s:%d", host, port)
    return ServerAddress(host=host, port=port)


async def _wait_drained_or_deadline(controller: DrainController, cut_grace: float) -> None:
    deadline = controller.deadline
    budget = None if deadline is None else max(0.0, deadline - time.monotonic()) + cut_grace
    if await controller.wait_drained(budget):
        stats = controller.statistics()
        logger.info(
            "drained in %.3f s: completed=%d cut=%d disconnected=%d rejected=%d",
            stats.drain_duration or 0.0,
            stats.completed,
            stats.cut_at_deadline,
            stats.client_disconnected,
            stats.rejected_while_draining,
        )
    else:
        logger.error(
            "%d request(s) still in flight after the drain deadline; exiting anyway",
            controller.in_flight,
        )
