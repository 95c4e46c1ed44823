"""The gate's hot path, client side: an asyncio protocol per connection.

:mod:`._reading` turns every byte into :class:`~._exchange.Exchange` values, kept in order; the
first is in flight: answered by the gate (``RelayHost.local``), refused (503 once the drain's
window closed), or admitted by the kit and relayed to :mod:`._upstream`, its head rebuilt and
its body sent as it arrives, with no task or future per chunk. Pipelined requests wait behind
it (at most ``MAX_QUEUED``, ``MAX_HELD`` bytes: then reading pauses). Flow control, not
buffering, for relayed and local answers alike: a transport past ``WRITE_HIGH`` unsent pauses
the side that feeds it. An exchange is in flight until the client's transport took the last
byte of its answer, the client left, or the drain deadline cut it; after a ``101`` the
connection is a tunnel, in flight until either side closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast

import httptools

from asyncdeploy.workload import DrainState, RequestOutcome

from ._exchange import Exchange, ExchangePhase
from ._host import LocalAnswer, RelayHost
from ._http import answer
from ._limits import Limits
from ._reading import RequestReader
from ._upstream import WRITE_HIGH, UpstreamConnection

__all__ = ["MAX_HELD", "MAX_QUEUED", "ClientConnection", "LocalAnswer", "RelayHost"]

logger = logging.getLogger("asyncdeploy.gate")

MAX_QUEUED = 16
"""Parsed requests a connection holds (the one in flight and those pipelined behind it)."""
MAX_HELD = 64 * 1024
"""Bytes a connection holds beyond its socket buffers: bodies of requests not yet sent on and
input not yet parsed. Past it reading pauses until the exchange in flight moves on."""
_SLICE = 8 * 1024  # pipelined input is parsed this much at a time, so the bounds above hold

# Why a client connection does not read (a bit mask: reading resumes once none is left).
_FULL_UPSTREAM = 1  # the engine's write buffer is full (request body flow control)
_HELD = 2  # MAX_QUEUED requests or MAX_HELD bytes wait for the exchange in flight


class ClientConnection(asyncio.Protocol):
    """One client connection: its requests in order, each relayed to the engine or answered."""

    __slots__ = (
        "_backlog",
        "_blocks",
        "_broken",
        "_eof",
        "_host",
        "_reader",
        "_reusable",
        "_served",
        "_write_paused",
        "closed",
        "idle_since",
        "queue",
        "transport",
        "tunnel",
        "upstream",
    )

    def __init__(self, host: RelayHost) -> None:
        self._host = host
        self.transport: asyncio.Transport | None = None
        self.queue: deque[Exchange] = deque()
        self._reader = RequestReader(self.queue, self._body)
        self._backlog = b""  # input held unparsed while the queue is full
        self.upstream: UpstreamConnection | None = None
        self.tunnel = False
        self._broken = False  # a malformed request: nothing after it is parsed
        self._served = 0
        self._reusable = False
        self._blocks = 0
        self._write_paused = False
        self._eof = False
        self.closed = False
        self.idle_since = time.monotonic()

    # --- the transport's callbacks --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without deriving from it
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        host = self._host
        if len(host.connections) >= host.limits.max_connections:
            # the excess is answered at once; the connections held are served on
            self.closed = True
            transport.write(host.refusal(close=True))
            transport.close()
            return
        host.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.tunnel:
            if self.upstream is not None:
                self.upstream.write(data)
            return
        if self._backlog or self._holding():
            self._backlog += data
            self._block(_HELD)
            return
        self._feed(data)
        self._advance()

    def eof_received(self) -> bool:
        self._eof = True
        if self.tunnel:
            return False  # the tunnel ends: connection_lost closes the engine's side
        # Half-closed with requests on their way: answer them, then close.
        return bool(self.queue)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._host.connections.discard(self)
        upstream, self.upstream = self.upstream, None
        exchange = self.queue[0] if self.queue else None
        if exchange is not None and exchange.admission is not None:
            exchange.release(
                RequestOutcome.COMPLETED if self.tunnel else RequestOutcome.CLIENT_DISCONNECTED
            )
            if upstream is not None and self.tunnel:
                upstream.close()  # the tunnel's end: what the client sent last still goes
            elif upstream is not None:
                upstream.abort()
        elif upstream is not None:
            upstream.close()
        for waiting in self.queue:
            waiting.phase = ExchangePhase.DONE
        self.queue.clear()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.upstream is not None:
            self.upstream.pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.queue and self.queue[0].phase is ExchangePhase.CLOSING:
            self._finish(self.queue[0])
        elif self.upstream is not None:
            self.upstream.resume()
        self._advance()

    def _body(self, exchange: Exchange, data: bytes) -> None:
        """A piece of a request's body, framed as it goes to the engine (``_reading``)."""
        if exchange.phase is ExchangePhase.RELAYING and self.upstream is not None:
            self.upstream.write(data)
            if exchange.kept is not None:
                exchange.kept.append(data)
        elif exchange.phase <= ExchangePhase.OPENING:  # not sent on yet: it waits (see _holding)
            exchange.wait_with(data)
        # an answered (local, refused) request's body is read and dropped

    # --- parsing and taking requests ----------------------------------------------------------
    def _holding(self) -> bool:
        """Whether input waits unparsed: the queue is full, or an upgrade request is in flight
        (what follows it is the tunnel's, or the next request's: its answer tells)."""
        queue = self.queue
        if not queue:  # the common case, on every read: nothing held
            return self._broken
        if self._broken or len(queue) >= MAX_QUEUED or queue[-1].upgrade:
            return True
        if len(queue) == 1:
            return queue[0].pending_size > MAX_HELD
        return sum(e.pending_size for e in queue) > MAX_HELD

    def _feed(self, data: bytes) -> None:
        if len(data) <= _SLICE and not self.queue:  # the common case: one request, idle
            self._feed_piece(data, b"")
            return
        view = memoryview(data)
        while view:
            if self._holding():
                self._backlog = bytes(view)
                self._block(_HELD)
                return
            piece = view[:_SLICE]
            view = view[len(piece) :]
            if self._feed_piece(piece, view):
                return
            if view and self.queue:
                self._advance()

    def _feed_piece(self, piece: bytes | memoryview, rest: bytes | memoryview) -> bool:
        """Parse ``piece`` (``rest`` follows it); True when parsing stops here."""
        try:
            self._reader.feed(piece)
        except httptools.HttpParserUpgrade as upgrade:
            # the last request asked for an upgrade: what follows waits for its answer
            upgraded = self.queue[-1]
            upgraded.upgrade_rest = bytes(piece[upgrade.args[0] :]) + bytes(rest)
            return True
        except httptools.HttpParserError as exc:
            self._malformed(str(exc.__cause__ or exc.__context__ or exc))
            return True
        return False

    def _malformed(self, reason: str) -> None:
        """llhttp refused the input: the request it was reading gets 400 (431: too large) in
        its turn; nothing after it is read."""
        self._broken = True
        self._backlog = b""
        exchange = self._reader.parsing
        if exchange is None:
            exchange = Exchange(time.monotonic())
        if exchange.error is None:
            exchange.error = (400, f"malformed request: {reason}"[:200])
        self._reader.parsing = None
        if exchange.phase is ExchangePhase.PARSING:
            exchange.phase = ExchangePhase.QUEUED
            self.queue.append(exchange)
        elif (
            exchange.phase in (ExchangePhase.OPENING, ExchangePhase.RELAYING)
            and exchange is self.queue[0]
        ):
            self._bad_body(exchange)

    def _resume_input(self) -> None:
        """The queue moved on: parse what was held, and read again."""
        if self._backlog and not self._holding():
            backlog, self._backlog = self._backlog, b""
            self._feed(backlog)
        if self._blocks & _HELD and not self._backlog and not self._holding():
            self._unblock(_HELD)

    def _advance(self) -> None:
        """Start the exchange at the head of the queue, and those after it that the gate
        answers at once, while the client takes its answers."""
        host = self._host
        queue = self.queue
        while queue and not self.closed and not self._write_paused:
            exchange = queue[0]
            if exchange.phase is not ExchangePhase.QUEUED:
                return
            if exchange.error is not None:
                status, reason = exchange.error
                self._write(answer(status, {"error": reason}, close=True, method=exchange.method))
                exchange.phase = ExchangePhase.DONE
                self.close()
                return
            local = host.local(exchange)
            if local is not None:
                if not isinstance(local, bytes):
                    exchange.phase = ExchangePhase.LOCAL
                    host.spawn(self._local, exchange, local)
                    return
                self._write(local)
                self._done_locally(exchange)
                continue
            admission = host.controller.try_admit()
            if admission is None:
                # The drain's window closed: each request held gets its 503, the last one
                # with Connection: close.
                last = len(queue) == 1 and self._reader.parsing is None and not self._backlog
                self._write(host.refusal(close=last))
                self._done_locally(exchange, close=last)
                continue
            exchange.admission = admission
            self._relay(exchange)

    def _done_locally(self, exchange: Exchange, *, close: bool = False) -> None:
        exchange.phase = ExchangePhase.DONE
        self.queue.popleft()
        self._served += 1
        if close or not exchange.keep_alive:
            self.close()
            return
        self._next()

    async def _local(
        self, exchange: Exchange, make: Callable[[], Coroutine[Any, Any, bytes]]
    ) -> None:
        data = await make()
        if self.closed:
            return
        self._write(data)
        self._done_locally(exchange)
        self._advance()

    # --- relaying -------------------------------------------------------------------------------
    def _relay(self, exchange: Exchange, replay: list[bytes] | None = None) -> None:
        exchange.phase = ExchangePhase.OPENING
        upstream = self.upstream
        if upstream is not None and (upstream.closed or replay or not exchange.replayable):
            # Closed by the engine while idle, a replay, or a request too large to keep for
            # one: a fresh connection (a request goes on a reused one only if it can be resent).
            upstream.close()
            upstream = self.upstream = None
        if upstream is None:
            self._host.spawn(self._open_upstream, exchange, replay)
        else:
            self._send(exchange, upstream, reused=True, replay=None)

    async def _open_upstream(self, exchange: Exchange, replay: list[bytes] | None) -> None:
        try:
            upstream = await self._host.connect_upstream()
        except OSError as exc:
            self.upstream_failed(f"cannot connect: {exc}", answered=False, untouched=False)
            return
        if self.closed or exchange.admission is None:  # the client left, or the drain cut it
            upstream.close()
            return
        self.upstream = upstream
        self._send(exchange, upstream, reused=False, replay=replay)

    def _send(
        self,
        exchange: Exchange,
        upstream: UpstreamConnection,
        *,
        reused: bool,
        replay: list[bytes] | None,
    ) -> None:
        upstream.start(self, exchange.method)
        if replay is None and not exchange.pending:
            data = exchange.head_bytes()
        else:
            parts = replay if replay is not None else [exchange.head_bytes()]
            parts += exchange.pending
            exchange.pending, exchange.pending_size = [], 0
            data = b"".join(parts)
        upstream.write(data)
        exchange.kept = [data] if reused else None
        exchange.phase = ExchangePhase.RELAYING
        self._resume_input()

    def _bad_body(self, exchange: Exchange) -> None:
        """A request body llhttp refused while it was relayed: the exchange ends here."""
        upstream, self.upstream = self.upstream, None
        answered = upstream is not None and upstream.answered
        if upstream is not None:
            upstream.abort()
        logger.warning("bad request body: %s", exchange.error)
        exchange.release(RequestOutcome.FAILED)
        if not answered:
            self._write(answer(400, {"error": "malformed request body"}, close=True))
        self.close()

    # --- what the upstream connection reports (``_upstream.Client``) ---------------------------
    def keep_for(self, keep_alive: bool) -> bool:
        """Whether the client connection stays open after this answer, decided at its head.
        While draining it does only for requests the client has sent already (pipelined):
        each is answered (served in the window, then refused), the last with Connection:
        close."""
        exchange = self.queue[0]
        exchange.kept = None  # the engine answers: this request is never sent again
        keep = exchange.keep_alive and keep_alive and not self._eof
        if keep and self._host.controller.state is not DrainState.SERVING:
            keep = len(self.queue) > 1 or self._reader.parsing is not None or bool(self._backlog)
        if not keep:
            exchange.keep_alive = False
        return keep

    def write_answer(self, data: bytes) -> None:
        self._write(data)

    def response_complete(self, *, reusable: bool) -> None:
        """The engine sent the answer's last byte; the exchange ends once the client took it."""
        self._reusable = reusable
        exchange = self.queue[0]
        exchange.phase = ExchangePhase.CLOSING
        if not self._write_paused:
            self._finish(exchange)
            self._advance()

    def upstream_failed(self, reason: str, *, answered: bool, untouched: bool) -> None:
        """The engine closed, reset or garbled its side; ``untouched``: it sent nothing."""
        self.upstream = None
        if self.closed or not self.queue:
            return
        exchange = self.queue[0]
        if exchange.admission is None:
            return
        if untouched and exchange.kept is not None:
            # A kept-alive connection the engine closed as the request reached it, without a
            # byte of answer (llama-server closes after every stream): the request once more,
            # whole, on a fresh connection. Only a reused connection's request is kept, so
            # one that fails on a fresh connection is not sent again.
            replay, exchange.kept = exchange.kept, None
            self._unblock(_FULL_UPSTREAM)
            self._relay(exchange, replay)
            return
        logger.warning("engine failed %s %s: %s", exchange.method, exchange.path, reason)
        exchange.release(RequestOutcome.FAILED)
        exchange.phase = ExchangePhase.DONE
        if not answered:
            self._write(answer(502, {"error": "engine unreachable"}, close=True))
        self.close()

    def upstream_full(self, full: bool) -> None:
        if full:
            self._block(_FULL_UPSTREAM)
        else:
            self._unblock(_FULL_UPSTREAM)

    def switched(self, rest: bytes) -> bool:
        """The engine answered 101: from here bytes go both ways unparsed."""
        exchange = self.queue[0]
        if not exchange.upgrade or self.upstream is None:
            return False
        exchange.phase = ExchangePhase.TUNNEL
        self.tunnel = True
        if rest:
            self._write(rest)
        ahead, self._backlog = exchange.upgrade_rest + self._backlog, b""
        if ahead:
            self.upstream.write(ahead)
        self._unblock(_HELD)
        return True

    def tunnel_closed(self) -> None:
        """The engine closed its side of the tunnel: the exchange is over, the client's too."""
        if self.queue:
            self.queue[0].release(RequestOutcome.COMPLETED)
        self.upstream = None
        self.close()

    def cut(self) -> None:
        """The drain deadline passed with this exchange open: end it on both sides, visibly."""
        exchange = self.queue[0] if self.queue else None
        if exchange is None or exchange.admission is None:
            return
        exchange.release(RequestOutcome.CUT_AT_DEADLINE)
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.abort()
        if self.transport is not None:
            self.transport.abort()

    def check_timeouts(self, now: float, limits: Limits) -> None:
        """The sweep's visit (``_server``): a head not received within ``header_timeout`` of
        its first byte (of the connection's start, for its first request) is answered 408; a
        keep-alive connection idle past ``idle_timeout`` is closed."""
        if self.closed or self.queue:
            return  # an exchange in flight: its own time is the engine's
        exchange = self._reader.parsing
        if exchange is not None or not self._served:
            started = exchange.started if exchange is not None else self.idle_since
            if now - started > limits.header_timeout:
                self._write(answer(408, {"error": "request head not received in time"}, close=True))
                self.close()
        elif now - self.idle_since > limits.idle_timeout:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # --- internals -----------------------------------------------------------------------------
    def _finish(self, exchange: Exchange) -> None:
        exchange.release(RequestOutcome.COMPLETED)
        exchange.phase = ExchangePhase.DONE
        self.queue.popleft()
        self._served += 1
        upstream = self.upstream
        if upstream is not None:
            upstream.client = None
            if not (self._reusable and exchange.received):
                upstream.close()
                self.upstream = None
        if not (exchange.keep_alive and exchange.received):
            self.close()
            return
        if exchange.upgrade_rest:  # an upgrade the engine refused: it was the next request
            self._backlog = exchange.upgrade_rest + self._backlog
        self._next()

    def _next(self) -> None:
        """An exchange is over and the connection stays: take what the client sent next (a
        half-closed client's connection closes once nothing it sent is left)."""
        self.idle_since = time.monotonic()
        self._resume_input()
        if self._eof and not self.queue:
            self.close()

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

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
