"""The gate's connection to the engine: one answer at a time, relayed back to its client.

Split from :mod:`._relay` (the client side); the two meet through :class:`Client`, what an
answer needs of the connection it goes back to, so neither module imports the other's class.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

from ._http import (
    MAX_HEAD,
    BodyKind,
    ChunkedScanner,
    HTTPParseError,
    RequestHead,
    ResponseHead,
    parse_response_head,
    with_connection_close,
)

__all__ = ["WRITE_HIGH", "Client", "UpstreamConnection"]

WRITE_HIGH = 64 * 1024
"""A transport holding more than this unsent pauses the side that feeds it."""


class Client(Protocol):
    """What an answer needs of the client connection it is relayed to."""

    @property
    def head(self) -> RequestHead | None: ...
    def keep_for(self, response: ResponseHead) -> bool: ...
    def write_answer(self, data: bytes) -> None: ...
    def response_complete(self, *, reusable: bool) -> None: ...
    def upstream_failed(self, reason: str, *, answered: bool, untouched: bool) -> None: ...
    def upstream_full(self, full: bool) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """The gate's connection to the engine: one answer at a time, back to its client."""

    __slots__ = (
        "_buffer",
        "_left",
        "_method",
        "_paused",
        "_received",
        "_response",
        "_scanner",
        "answered",
        "client",
        "closed",
        "transport",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.client: Client | None = None
        self.closed = False
        self.answered = False
        self._buffer = b""
        self._method = b"GET"
        self._response: ResponseHead | None = None
        self._left = 0
        self._scanner: ChunkedScanner | None = None
        self._received = False
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without deriving from it
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH)

    def start(self, client: Client, method: bytes) -> None:
        self.client = client
        self._method = method
        self._response = None
        self._buffer = b""
        self._scanner = None
        self.answered = False
        self._received = False
        self.resume()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client is None:  # bytes between exchanges: this connection cannot be trusted again
            self.close()
            return
        self._received = True
        if self._response is None:
            self._head(client, data)
        else:
            self._body(client, data, b"")

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost tells an until-close body's end

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        client, self.client = self.client, None
        if client is None:
            return
        response = self._response
        if response is not None and response.body is BodyKind.UNTIL_CLOSE and exc is None:
            client.response_complete(reusable=False)
            return
        reason = "the engine closed the connection " + (
            "mid-answer" if self.answered else "before answering"
        )
        if exc is not None:
            reason += f": {exc!r}"
        client.upstream_failed(reason, answered=self.answered, untouched=not self._received)

    def pause_writing(self) -> None:
        if self.client is not None:
            self.client.upstream_full(True)

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.upstream_full(False)

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.client = None
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.client = None
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # --- the answer ----------------------------------------------------------------------------
    def _head(self, client: Client, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._fail(client, f"head longer than {MAX_HEAD} bytes")
                else:
                    self._buffer = buffer
                return
            raw, buffer = buffer[: end + 4], buffer[end + 4 :]
            try:
                response = parse_response_head(raw, request_method=self._method)
            except HTTPParseError as exc:
                self._fail(client, str(exc))
                return
            if not response.interim:
                break
            client.write_answer(raw)  # 100 Continue, 103 Early Hints: passed on, then the answer
        self._buffer = b""
        self._response = response
        head = client.head
        assert head is not None
        if not client.keep_for(response) and response.keep_alive and head.keep_alive:
            raw = with_connection_close(response)  # draining: keep-alive clients reconnect
        self._left = response.length
        if response.body is BodyKind.CHUNKED:
            self._scanner = ChunkedScanner()
        self.answered = True
        self._body(client, buffer, raw)

    def _body(self, client: Client, data: bytes, prefix: bytes) -> None:
        """Relay answer bytes (after ``prefix``, the head: one write for both)."""
        response = self._response
        assert response is not None
        kind = response.body
        if kind is BodyKind.LENGTH:
            extra = len(data) > self._left
            if extra:
                data = data[: self._left]
            self._left -= len(data)
            client.write_answer(prefix + data if prefix else data)
            if self._left == 0:
                self._done(client, extra)
        elif kind is BodyKind.CHUNKED:
            scanner = self._scanner
            assert scanner is not None
            try:
                used = scanner.feed(data)
            except HTTPParseError as exc:
                if prefix:
                    client.write_answer(prefix)
                self._fail(client, str(exc))
                return
            extra = used < len(data)
            if extra:
                data = data[:used]
            client.write_answer(prefix + data if prefix else data)
            if scanner.done:
                self._done(client, extra)
        elif kind is BodyKind.UNTIL_CLOSE:
            client.write_answer(prefix + data if prefix else data)
        else:  # no body
            client.write_answer(prefix)
            self._done(client, bool(data))

    def _done(self, client: Client, extra: bool) -> None:
        """The answer's last byte was passed on; bytes past it: never reuse this connection."""
        response = self._response
        assert response is not None
        client.response_complete(reusable=not extra and response.keep_alive)

    def _fail(self, client: Client, reason: str) -> None:
        answered = self.answered
        self.abort()
        client.upstream_failed(reason, answered=answered, untouched=False)
