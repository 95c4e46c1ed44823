"""ASGI middleware: health endpoints, the admission gate and in-flight accounting.

A request is admitted before the wrapped app runs and released when the last response frame's
``send`` returned (``more_body=False``), when the client disconnected, or when the drain deadline
cut it. Once a drain has begun, readiness fails at once, new requests are still admitted while
the controller's propagation window is open, and after it they get ``503`` + ``Retry-After`` +
``Connection: close`` before the app sees them; responses given while draining carry
``Connection: close``. A WebSocket is admitted the same way and in flight until the app is done
with it. Lifespan scopes pass through untouched.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from ._asgi import (
    ASGIApp,
    Headers,
    Message,
    Receive,
    Scope,
    Send,
    header,
    json_bytes,
    requests_queued,
    send_response,
)
from .metrics import METRICS_CONTENT_TYPE, render_metrics
from .state import Admission, DrainController, DrainState, RequestOutcome

__all__ = ["DrainMiddleware", "HealthPaths", "sse_cut_frame"]

logger = logging.getLogger("asyncdeploy.workload")

_CLOSE = (b"connection", b"close")
# An app failing because of these (cancelled, or writing to a closed connection) is no error.
_ENDED_BY_US = (RequestOutcome.CLIENT_DISCONNECTED, RequestOutcome.CUT_AT_DEADLINE)


@attrs.frozen(kw_only=True)
class HealthPaths:
    """Paths the middleware answers itself; None disables one.

    ``metrics`` is off by default so that the app's own ``/metrics`` (vLLM has one) is reached;
    set a path of its own (e.g. ``"/-/metrics"``) to serve the kit's metrics in text format, or
    register :class:`asyncdeploy.workload.prometheus.DrainCollector` with the app's registry.
    """

    ready: str | None = "/ready"
    live: str | None = "/live"
    startup: str | None = "/startup"
    metrics: str | None = None


def sse_cut_frame(reason: str, request_id: str | None) -> bytes:
    """The final SSE event sent when a stream is ended early."""
    data: dict[str, Any] = {"reason": reason}
    if request_id is not None:
        data["request_id"] = request_id
    return b"event: cut\ndata: " + json_bytes(data) + b"\n\n"


class _Exchange:
    """Response progress of one admitted request."""

    def __init__(self, admission: Admission, request_id: str | None) -> None:
        self.admission = admission
        self.request_id = request_id
        self.started = False
        #: The client went away; with ``cancel_on_disconnect=False`` the app may still work.
        self.client_gone = False
        self.is_sse = False
        self.trailers = False
        self.cut_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.admission.released

    def on_start(self, message: Message) -> None:
        self.started = True
        headers = message.get("headers", [])
        content_type = header(headers, b"content-type") or b""
        self.is_sse = content_type.split(b";")[0].strip().lower() == b"text/event-stream"
        self.trailers = bool(message.get("trailers", False))
        response_id = header(headers, b"x-request-id")
        if response_id is not None:
            self.request_id = response_id.decode("latin-1")

    def is_last_frame(self, message: Message) -> bool:
        kind = message["type"]
        if kind == "http.response.body":
            return not self.trailers and not message.get("more_body", False)
        if kind == "http.response.trailers":
            return not message.get("more_trailers", False)
        return kind in ("http.response.pathsend", "http.response.zerocopysend")


#: Close codes of a peer that went away (1005: none given, 1006: no close frame).
_WS_GONE = (1005, 1006)


class _Socket:
    """Progress of one admitted WebSocket."""

    def __init__(self) -> None:
        self.accepted = False
        self.closed = False
        self.cut = False
        self.close_code: int | None = None

    def outcome(self) -> RequestOutcome:
        if self.cut:
            return RequestOutcome.CUT_AT_DEADLINE
        if self.close_code in _WS_GONE:
            return RequestOutcome.CLIENT_DISCONNECTED
        return RequestOutcome.COMPLETED


class DrainMiddleware:
    """Wrap ``app`` with the drain kit driven by ``controller``.

    ``retry_after`` is the ``Retry-After`` value (seconds) of 503 answers; ``cut_send_timeout``
    bounds the write of the final frame of a cut stream (``serve_with_drain`` waits that long
    past the drain deadline); with ``cancel_on_disconnect`` the app is cancelled when its client
    goes away, without it the app runs on and counts as in flight until it returns.
    """

    def __init__(
        self,
        app: ASGIApp,
        controller: DrainController,
        *,
        paths: HealthPaths = HealthPaths(),
        retry_after: int = 5,
        cut_send_timeout: float = 2.0,
        cancel_on_disconnect: bool = True,
    ) -> None:
        self.app = app
        self.controller = controller
        self.paths = paths
        self.retry_after = retry_after
        self.cut_send_timeout = cut_send_timeout
        self.cancel_on_disconnect = cancel_on_disconnect
        self._health = {
            path: handler
            for path, handler in (
                (paths.ready, self._ready),
                (paths.live, self._live),
                (paths.startup, self._startup),
                (paths.metrics, self._metrics),
            )
            if path is not None
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        handler = self._health.get(scope["path"])
        if handler is not None:
            await handler(send)
            return
        admission = self.controller.try_admit()
        if admission is None:
            await self._reject(send, self.controller.state, close=not requests_queued(scope))
            return
        request_id = header(scope.get("headers", []), b"x-request-id")
        exchange = _Exchange(
            admission, None if request_id is None else request_id.decode("latin-1")
        )
        try:
            await self._run(scope, receive, send, exchange)
        finally:
            # The app returned (or raised) without finishing its response; a client that left
            # while the app went on working (cancel_on_disconnect=False) is released only now.
            admission.release(
                RequestOutcome.CLIENT_DISCONNECTED
                if exchange.client_gone
                else RequestOutcome.FAILED
            )

    # -- admitted requests ---------------------------------------------------------------
    async def _run(self, scope: Scope, receive: Receive, send: Send, ex: _Exchange) -> None:
        app_scope = anyio.CancelScope()
        error: Exception | None = None
        to_app, from_pump = anyio.create_memory_object_stream[Message](1)

        async def app_receive() -> Message:
            try:
                return await from_pump.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return {"type": "http.disconnect"}

        async def app_send(message: Message) -> None:
            if ex.client_gone:
                return  # nobody is listening any more
            if ex.cut_reason is not None and not ex.started:
                return  # a 503 is about to replace this response
            if message["type"] == "http.response.start":
                ex.on_start(message)
                headers = message.get("headers", [])
                if (
                    self.controller.draining.is_set()
                    and header(headers, b"connection") is None
                    and not requests_queued(scope)  # answer those first: the last one closes
                ):
                    # keep-alive clients should reconnect to another replica
                    message = {**message, "headers": [*headers, _CLOSE]}
            try:
                await send(message)
            except Exception:
                self._disconnected(ex, app_scope)
                raise
            if ex.is_last_frame(message):
                ex.admission.release(RequestOutcome.COMPLETED)

        # to_app is closed by the pump, and here too in case the pump never got to run
        async with to_app, from_pump, anyio.create_task_group() as tg:
            tg.start_soon(self._pump, receive, to_app, ex, app_scope)
            tg.start_soon(self._watch_deadline, ex, app_scope)
            with app_scope:
                try:
                    await self.app(scope, app_receive, app_send)
                except Exception as exc:  # noqa: BLE001 - re-raised below unless we ended it
                    error = exc
            if ex.cut_reason is not None and not ex.finished:
                await self._send_cut(send, ex)
            tg.cancel_scope.cancel()
        if error is not None and not ex.client_gone and ex.admission.outcome not in _ENDED_BY_US:
            raise error

    async def _pump(
        self,
        receive: Receive,
        to_app: MemoryObjectSendStream[Message],
        ex: _Exchange,
        app_scope: anyio.CancelScope,
    ) -> None:
        """The only reader of the server's ``receive``: forwards to the app, spots disconnects."""
        async with to_app:
            while True:
                try:
                    message = await receive()
                except Exception:  # noqa: BLE001 - some servers raise instead of reporting it
                    message = {"type": "http.disconnect"}
                if message["type"] == "http.disconnect":
                    self._disconnected(ex, app_scope)
                    return
                try:
                    await to_app.send(message)
                except anyio.BrokenResourceError:
                    return

    def _disconnected(self, ex: _Exchange, app_scope: anyio.CancelScope) -> None:
        if ex.client_gone or ex.finished:
            return
        ex.client_gone = True
        logger.info("client disconnected: request_id=%s", ex.request_id)
        if self.cancel_on_disconnect:
            ex.admission.release(RequestOutcome.CLIENT_DISCONNECTED)
            app_scope.cancel()
        # else the app goes on, and stays in flight until it returns

    async def _watch_deadline(self, ex: _Exchange, app_scope: anyio.CancelScope) -> None:
        reason = await self.controller.wait_cut()
        if not ex.finished:
            ex.cut_reason = reason
            app_scope.cancel()

    async def _send_cut(self, send: Send, ex: _Exchange) -> None:
        """End a response after its app was cancelled at the drain deadline, visibly.

        Nothing sent yet: a retryable 503. An SSE stream: a final ``event: cut``. Any other
        started response is left unfinished (no last frame: the server closes the connection
        without ending the chunked body or reaching the Content-Length), so no client takes a
        cut body for a complete one. A cut frame that cannot be written within
        ``cut_send_timeout`` (a client that stopped reading) leaves the SSE stream unfinished
        the same way.
        """
        reason = ex.cut_reason or "drain-deadline"
        if ex.client_gone:  # the app was still working for a client that had left
            ex.admission.release(RequestOutcome.CLIENT_DISCONNECTED)
            return
        written = not ex.started or ex.is_sse
        with anyio.move_on_after(self.cut_send_timeout, shield=True) as timer:
            try:
                if not ex.started:  # nothing sent yet: a retryable answer
                    body = json_bytes({"error": reason, "request_id": ex.request_id})
                    await send_response(send, 503, body, extra_headers=self._retry_headers())
                elif ex.is_sse:
                    frame = sse_cut_frame(reason, ex.request_id)
                    await send({"type": "http.response.body", "body": frame, "more_body": False})
            except Exception as exc:  # noqa: BLE001 - the client is gone too; the cut still counts
                logger.debug("writing the cut frame failed: %r", exc)
                written = False
        if timer.cancelled_caught:
            written = False
            logger.warning(
                "cut frame not written within %g s (the client does not read): request_id=%s; "
                "the response ends unfinished",
                self.cut_send_timeout,
                ex.request_id,
            )
        if not ex.finished:
            logger.warning(
                "response cut: reason=%s request_id=%s started=%s sse=%s ending=%s",
                reason,
                ex.request_id,
                ex.started,
                ex.is_sse,
                "cut frame" if written else "unfinished",
            )
            ex.admission.release(RequestOutcome.CUT_AT_DEADLINE)

    # -- websockets ----------------------------------------------------------------------
    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit a WebSocket like a request; it is in flight until the app is done with it.

        At the drain deadline the app is cancelled and the socket closed with 1012 (service
        restart: reconnect elsewhere); refused ones get a 503 (or a close before accepting,
        which servers without the ``websocket.http.response`` extension answer with 403).
        """
        admission = self.controller.try_admit()
        if admission is None:
            await self._reject_websocket(scope, send)
            return
        socket = _Socket()

        async def app_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                socket.closed = True
                socket.close_code = int(message.get("code", 1005))
            return message

        async def app_send(message: Message) -> None:
            if socket.cut:
                return  # the middleware closes it
            kind = message["type"]
            await send(message)
            if kind == "websocket.accept":
                socket.accepted = True
            elif kind in ("websocket.close", "websocket.http.response.body"):
                socket.closed = True

        app_scope = anyio.CancelScope()
        outcome = RequestOutcome.FAILED
        try:
            async with anyio.create_task_group() as tg:

                async def watch_deadline() -> None:
                    reason = await self.controller.wait_cut()
                    if not socket.closed:
                        socket.cut = True
                        logger.warning("websocket cut: reason=%s", reason)
                        app_scope.cancel()

                tg.start_soon(watch_deadline)
                with app_scope:
                    await self.app(scope, app_receive, app_send)
                if socket.cut:
                    await self._close_cut_websocket(send, socket)
                tg.cancel_scope.cancel()
            outcome = socket.outcome()
        except Exception:
            if not socket.cut and socket.close_code not in _WS_GONE:
                raise  # the app failed: the server reports it
            outcome = socket.outcome()
        finally:
            admission.release(outcome)

    async def _close_cut_websocket(self, send: Send, socket: _Socket) -> None:
        with anyio.move_on_after(self.cut_send_timeout, shield=True):
            try:
                if socket.accepted:
                    await send({"type": "websocket.close", "code": 1012, "reason": "draining"})
                else:
                    await send({"type": "websocket.close", "code": 1012})
            except Exception as exc:  # noqa: BLE001 - gone already; the cut still counts
                logger.debug("closing the cut websocket failed: %r", exc)

    async def _reject_websocket(self, scope: Scope, send: Send) -> None:
        if "websocket.http.response" in scope.get("extensions", {}):
            state = self.controller.state.value
            body = json_bytes({"error": state, "retry_after": self.retry_after})
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *self._retry_headers(),
            ]
            await send({"type": "websocket.http.response.start", "status": 503, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1013})  # "try again later"

    # -- rejections and health -----------------------------------------------------------
    def _retry_headers(self, *, close: bool = True) -> Headers:
        retry = (b"retry-after", str(self.retry_after).encode())
        return [retry, _CLOSE] if close else [retry]

    async def _reject(self, send: Send, state: DrainState, *, close: bool = True) -> None:
        """503 + Retry-After, and Connection: close unless pipelined requests wait behind it
        (each of them is answered in turn; the last answer closes)."""
        body = json_bytes({"error": state.value, "retry_after": self.retry_after})
        await send_response(send, 503, body, extra_headers=self._retry_headers(close=close))

    async def _probe(self, send: Send, ok: bool) -> None:
        controller = self.controller
        body = json_bytes(
            {"ok": ok, "state": controller.state.value, "in_flight": controller.in_flight}
        )
        await send_response(send, 200 if ok else 503, body)

    async def _ready(self, send: Send) -> None:
        await self._probe(send, self.controller.check_ready())

    async def _live(self, send: Send) -> None:
        await self._probe(send, self.controller.broken_reason is None)

    async def _startup(self, send: Send) -> None:
        await self._probe(send, self.controller.state is not DrainState.STARTING)

    async def _metrics(self, send: Send) -> None:
        text = render_metrics(self.controller)
        await send_response(send, 200, text.encode(), content_type=METRICS_CONTENT_TYPE)
