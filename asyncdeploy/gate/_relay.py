"""The gate's hot path: asyncio protocols that relay each exchange transport to transport.

A client connection parses each request head once (:mod:`._http`), admits it with the kit's
state machine, and writes it to its upstream connection; from then on bytes are relayed as they
arrive, in the protocols' callbacks, with no task switch or future per chunk (measured in
``benchmarks/gate.py``: the asyncio-streams relay this replaces spent most of its time in
them). Flow control instead of buffering: a transport whose write buffer passes ``WRITE_HIGH``
pauses reading on the other side until it has drained, so a slow client slows the engine's
connection rather than filling the gate's memory. An exchange is in flight from its head until
the client's transport took the last byte of the answer (its buffer back under
``WRITE_HIGH``), or the client left, or the drain deadline cut it.

Pipelining: requests behind the one in flight wait in the client's buffer (reading pauses past
``MAX_HEAD``) and are taken in order. The only tasks are the upstream connect (once per client
connection while the engine keeps it alive) and an asynchronous local answer (the drain hook),
both started in the gate's task group (:meth:`RelayHost.spawn`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from asyncdeploy.workload import Admission, DrainController, DrainState, RequestOutcome

from ._http import (
    MAX_HEAD,
    BodyKind,
    ChunkedScanner,
    HTTPParseError,
    RequestHead,
    ResponseHead,
    parse_request_head,
)
from ._upstream import WRITE_HIGH, UpstreamConnection

__all__ = ["IDLE", "ClientConnection", "LocalAnswer", "RelayHost"]

logger = logging.getLogger("asyncdeploy.gate")

LocalAnswer = bytes | Callable[[], Coroutine[Any, Any, bytes]]
"""What the gate answers itself: the bytes now, or a coroutine function that makes them."""

# What a client connection is doing (ints: compared on every chunk).
IDLE = 0  # waiting for a request head
_CONNECTING = 1  # admitted, the upstream connection is being opened
_BODY = 2  # relaying the request body
_WAIT = 3  # request sent, relaying the answer
_LOCAL = 4  # an asynchronous local answer is being made

# Why a client connection does not read (a bit mask: reading resumes once none is left).
_FULL_UPSTREAM = 1  # the upstream's write buffer is full (request body flow control)
_FULL_BUFFER = 2  # pipelined bytes past MAX_HEAD wait for the exchange in flight


class RelayHost(Protocol):
    """What the protocols need of the gate (``_server._Gate``)."""

    @property
    def controller(self) -> DrainController: ...
    @property
    def connections(self) -> set[ClientConnection]: ...
    def local(self, head: RequestHead) -> LocalAnswer | None: ...
    def answer(self, status: int, body: object, *, close: bool = False) -> bytes: ...
    def refusal(self) -> bytes: ...
    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None: ...
    async def connect_upstream(self) -> UpstreamConnection: ...


class ClientConnection(asyncio.Protocol):
    """One client connection: its requests in order, each relayed to the engine or answered."""

    __slots__ = (
        "_blocks",
        "_body_left",
        "_body_scanner",
        "_buffer",
        "_close_after",
        "_eof",
        "_finishing",
        "_front",
        "_keep",
        "_retried",
        "_reusable",
        "_reused",
        "_write_paused",
        "admission",
        "closed",
        "head",
        "idle_since",
        "phase",
        "request_done",
        "transport",
        "upstream",
    )

    def __init__(self, front: RelayHost) -> None:
        self._front = front
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self.phase = IDLE
        self.upstream: UpstreamConnection | None = None
        self.head: RequestHead | None = None
        self.admission: Admission | None = None
        self.request_done = True
        self._body_left = 0
        self._body_scanner: ChunkedScanner | None = None
        self._close_after = False
        self._reused = False
        self._retried = False
        self._keep = False
        self._reusable = False
        self._finishing = False
        self._write_paused = False
        self._blocks = 0
        self._eof = False
        self.closed = False
        self.idle_since = time.monotonic()

    # --- transport callbacks -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without deriving from it
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self._front.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.phase == _BODY:
            self._forward_body(data)
            return
        self._buffer += data
        if self.phase == IDLE:
            self._next_request()
        elif len(self._buffer) > MAX_HEAD:
            self._block(_FULL_BUFFER)

    def eof_received(self) -> bool:
        self._eof = True
        # Half-closed while a request is on its way: answer it, then close.
        return self.phase != IDLE

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._front.connections.discard(self)
        upstream, self.upstream = self.upstream, None
        if self.admission is not None:
            self._release(RequestOutcome.CLIENT_DISCONNECTED)
            if upstream is not None:
                upstream.abort()
        elif upstream is not None:
            upstream.close()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.upstream is not None:
            self.upstream.pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._finishing:
            self._finishing = False
            self._finish()
        elif self.upstream is not None:
            self.upstream.resume()

    # --- requests ------------------------------------------------------------------------------
    def _next_request(self) -> None:
        """Take the complete request heads buffered, one exchange at a time."""
        front = self._front
        while self.phase == IDLE and not self.closed:
            buffer = self._buffer
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._answer_and_close(400, {"error": "bad request"})
                elif self._eof:
                    self.close()
                return
            raw, self._buffer = buffer[: end + 4], buffer[end + 4 :]
            try:
                head = parse_request_head(raw)
            except HTTPParseError as exc:
                self._answer_and_close(400, {"error": str(exc)})
                return
            local = front.local(head)
            if local is not None:
                # A body the gate does not read cannot be skipped safely: close after it.
                close = not head.keep_alive or head.body is not BodyKind.NONE
                if isinstance(local, bytes):
                    self._write(local)
                    if close:
                        self.close()
                        return
                    self.idle_since = time.monotonic()
                    continue
                self.phase = _LOCAL
                front.spawn(self._local, local, close)
                return
            admission = front.controller.try_admit()
            if admission is None:
                self._write(front.refusal())
                self.close()
                return
            self._begin(head, admission)

    def _begin(self, head: RequestHead, admission: Admission) -> None:
        self.head = head
        self.admission = admission
        self._close_after = self._front.controller.state is not DrainState.SERVING
        self.request_done = head.body is BodyKind.NONE
        self._body_left = head.length
        self._body_scanner = ChunkedScanner() if head.body is BodyKind.CHUNKED else None
        self._retried = False
        upstream = self.upstream
        if upstream is not None and upstream.closed:
            upstream = self.upstream = None
        if upstream is None:
            self._connect()
        else:
            self._send(upstream, reused=True)

    def _connect(self) -> None:
        self.phase = _CONNECTING
        self._front.spawn(self._open_upstream)

    async def _open_upstream(self) -> None:
        try:
            upstream = await self._front.connect_upstream()
        except OSError as exc:
            self.upstream_failed(f"cannot connect: {exc}", answered=False, untouched=False)
            return
        if self.closed or self.admission is None:  # the client left, or the drain cut it
            upstream.close()
            return
        self.upstream = upstream
        self._send(upstream, reused=False)

    def _send(self, upstream: UpstreamConnection, *, reused: bool) -> None:
        head = self.head
        assert head is not None
        self._reused = reused
        upstream.start(self, head.method)
        upstream.write(head.raw)
        if self.request_done:
            self.phase = _WAIT
            return
        self.phase = _BODY
        rest, self._buffer = self._buffer, b""
        self._unblock(_FULL_BUFFER)  # what waited while connecting is body: relayed now
        if rest:
            self._forward_body(rest)

    def _forward_body(self, data: bytes) -> None:
        """Relay request body bytes; the first bytes past its end belong to the next request."""
        rest = b""
        scanner = self._body_scanner
        if scanner is None:
            if len(data) > self._body_left:
                data, rest = data[: self._body_left], data[self._body_left :]
            self._body_left -= len(data)
            done = self._body_left == 0
        else:
            try:
                used = scanner.feed(data)
            except HTTPParseError as exc:
                self._bad_body(str(exc))
                return
            if used < len(data):
                data, rest = data[:used], data[used:]
            done = scanner.done
        upstream = self.upstream
        if upstream is not None:
            upstream.write(data)
        if done:
            self.request_done = True
            self.phase = _WAIT
            self._buffer = rest
            if len(rest) > MAX_HEAD:
                self._block(_FULL_BUFFER)

    def _bad_body(self, reason: str) -> None:
        """A chunked request body the gate cannot follow: the exchange ends here."""
        upstream, self.upstream = self.upstream, None
        answered = upstream is not None and upstream.answered
        if upstream is not None:
            upstream.abort()
        logger.warning("bad request body: %s", reason)
        self._release(RequestOutcome.FAILED)
        if answered:
            self.close()
        else:
            self._answer_and_close(400, {"error": reason})

    async def _local(self, make: Callable[[], Coroutine[Any, Any, bytes]], close: bool) -> None:
        answer = await make()
        if self.closed:
            return
        self._write(answer)
        if close:
            self.close()
            return
        self._idle()

    # --- what the upstream connection reports ------------------------------------------------
    def keep_for(self, response: ResponseHead) -> bool:
        """Whether the client connection stays open after this answer (decided at its head:
        while draining the answer carries ``Connection: close``)."""
        head = self.head
        assert head is not None
        self._keep = head.keep_alive and response.keep_alive and not self._close_after
        return self._keep

    def response_complete(self, *, reusable: bool) -> None:
        """The engine sent the answer's last byte; the exchange ends once the client took it."""
        self._reusable = reusable
        if self._write_paused:
            self._finishing = True
            return
        self._finish()

    def upstream_failed(self, reason: str, *, answered: bool, untouched: bool) -> None:
        """The engine closed, reset or garbled its side; ``untouched``: it sent nothing."""
        self.upstream = None
        head = self.head
        if self.admission is None or head is None or self.closed:
            return
        if untouched and self._reused and head.body is BodyKind.NONE and not self._retried:
            # A kept-alive connection the engine closed while idle: once more on a new one
            # (nothing of this request reached the engine's app, nothing reached the client).
            self._retried = True
            self._connect()
            return
        logger.warning("engine failed %s %s: %s", head.method, head.path, reason)
        self._release(RequestOutcome.FAILED)
        if answered:
            self.close()
        else:
            self._answer_and_close(502, {"error": "engine unreachable"})

    def cut(self) -> None:
        """The drain deadline passed with this exchange open: end it on both sides."""
        if self.admission is None:
            return
        self._release(RequestOutcome.CUT_AT_DEADLINE)
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.abort()
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # --- internals -----------------------------------------------------------------------------
    def _finish(self) -> None:
        head = self.head
        assert head is not None
        self._release(RequestOutcome.COMPLETED)
        upstream = self.upstream
        if upstream is not None:
            upstream.client = None
            # After a HEAD, a server that wrongly sent a body would garble the next answer.
            if not (self._reusable and self.request_done and head.method != b"HEAD"):
                upstream.close()
                self.upstream = None
        if not (self._keep and self.request_done):
            self.close()
            return
        self._idle()

    def _idle(self) -> None:
        self.phase = IDLE
        self.head = None
        self.idle_since = time.monotonic()
        self._unblock(_FULL_BUFFER)
        if self._buffer or self._eof:
            self._next_request()

    def _release(self, outcome: RequestOutcome) -> None:
        admission, self.admission = self.admission, None
        if admission is not None:
            admission.release(outcome)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def write_answer(self, data: bytes) -> None:
        """Bytes of the engine's answer, as they come."""
        self._write(data)

    def _answer_and_close(self, status: int, body: object) -> None:
        self._write(self._front.answer(status, body, close=True))
        self.close()

    def _block(self, reason: int) -> None:
        if not self._blocks and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._blocks |= reason

    def _unblock(self, reason: int) -> None:
        if not self._blocks & reason:
            return
        self._blocks &= ~reason
        if not self._blocks and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def upstream_full(self, full: bool) -> None:
        if full:
            self._block(_FULL_UPSTREAM)
        else:
            self._unblock(_FULL_UPSTREAM)
