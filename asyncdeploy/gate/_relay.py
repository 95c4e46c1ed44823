"""One exchange through the gate: the request to the engine, its answer back, byte for byte.

Every write waits until the socket took the bytes (anyio's ``send``), so nothing is buffered
beyond one read: a token the engine streams reaches the client as it comes, and a slow client
slows the engine's connection instead of filling the gate's memory. Failures are told apart by
side (:class:`ClientGone`, :class:`UpstreamFailed`) because they end a request differently.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import anyio

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

__all__ = ["ByteStream", "ClientGone", "Reader", "StreamPair", "UpstreamFailed", "relay_exchange"]

READ_SIZE = 65536
_LOST = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ConnectionError,
    OSError,
)


class ByteStream(Protocol):
    """What the relay needs of a connection (anyio's streams have it, and :class:`StreamPair`)."""

    async def receive(self, max_bytes: int = 65536) -> bytes: ...
    async def send(self, item: bytes) -> None: ...
    async def aclose(self) -> None: ...


class StreamPair:
    """An asyncio stream pair as a :class:`ByteStream`: the gate's hot path.

    Measured (benchmarks/gate.py) against anyio's socket streams, whose checkpoint and cancel
    scope per call cost more than the relaying itself. ``send`` returns once the transport holds
    less than ``WRITE_HIGH`` bytes, so a slow reader pushes back instead of filling memory.
    """

    __slots__ = ("_reader", "_writer")
    WRITE_HIGH = 16 * 1024

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        writer.transport.set_write_buffer_limits(high=self.WRITE_HIGH)

    @classmethod
    async def connect(cls, host: str, port: int) -> StreamPair:
        reader, writer = await asyncio.open_connection(host, port, limit=READ_SIZE)
        return cls(reader, writer)

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        if self._writer.is_closing():
            raise anyio.BrokenResourceError
        self._writer.write(item)
        await self._writer.drain()

    async def aclose(self) -> None:
        self._writer.close()


class ClientGone(Exception):
    """The client closed or reset its connection."""


class UpstreamFailed(Exception):
    """The engine closed, reset or garbled its side; ``answered`` once bytes reached the client."""

    def __init__(self, reason: str, *, answered: bool) -> None:
        super().__init__(reason)
        self.answered = answered


class Reader:
    """A receive buffer over a byte stream, with push-back for bytes past a message's end."""

    __slots__ = ("_buffer", "stream")

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._buffer = b""

    @property
    def buffered(self) -> bytes:
        return self._buffer

    async def head(self) -> bytes | None:
        """Bytes up to and including the first empty line; None at a clean end of stream."""
        buffer = self._buffer
        start = 0
        while True:
            end = buffer.find(b"\r\n\r\n", start)
            if end >= 0:
                self._buffer = buffer[end + 4 :]
                return buffer[: end + 4]
            if len(buffer) > MAX_HEAD:
                raise HTTPParseError(f"head longer than {MAX_HEAD} bytes")
            start = max(0, len(buffer) - 3)
            try:
                data = await self.stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                if buffer.strip():
                    raise HTTPParseError("connection closed inside a head") from None
                return None
            buffer += data

    async def some(self, limit: int = READ_SIZE) -> bytes:
        """Whatever is buffered or arrives next, at most ``limit`` bytes (EndOfStream at the end)."""
        if self._buffer:
            data, self._buffer = self._buffer[:limit], self._buffer[limit:]
            return data
        return await self.stream.receive(min(limit, READ_SIZE))

    def take(self, limit: int) -> bytes:
        """What is already buffered, at most ``limit`` bytes, without waiting."""
        data, self._buffer = self._buffer[:limit], self._buffer[limit:]
        return data

    def unread(self, data: bytes) -> None:
        self._buffer = data + self._buffer


async def _to_client(client: ByteStream, data: bytes) -> None:
    try:
        await client.send(data)
    except _LOST as exc:
        raise ClientGone(repr(exc)) from exc


async def _from_upstream(upstream: Reader, limit: int, answered: bool) -> bytes:
    try:
        return await upstream.some(limit)
    except anyio.EndOfStream:
        raise UpstreamFailed(
            "the engine closed the connection mid-answer", answered=answered
        ) from None
    except _LOST as exc:
        raise UpstreamFailed(repr(exc), answered=answered) from exc


async def _pump_request_body(head: RequestHead, client: Reader, upstream: ByteStream) -> None:
    """Forward the request body as it arrives (a chunked one scanned for its end)."""
    scanner = ChunkedScanner() if head.body is BodyKind.CHUNKED else None
    left = head.length
    while (scanner is not None and not scanner.done) or (scanner is None and left > 0):
        try:
            data = await client.some(left if scanner is None else READ_SIZE)
        except _LOST as exc:
            raise ClientGone(repr(exc)) from exc
        if scanner is not None:
            used = scanner.feed(data)
            if used < len(data):
                client.unread(data[used:])  # the next pipelined request
                data = data[:used]
        else:
            left -= len(data)
        try:
            await upstream.send(data)
        except _LOST as exc:
            raise UpstreamFailed(repr(exc), answered=False) from exc


async def _response_head(head: RequestHead, upstream: Reader, client: ByteStream) -> ResponseHead:
    while True:
        try:
            raw = await upstream.head()
        except HTTPParseError as exc:
            raise UpstreamFailed(str(exc), answered=False) from exc
        except _LOST as exc:
            raise UpstreamFailed(repr(exc), answered=False) from exc
        if raw is None:
            raise UpstreamFailed(
                "the engine closed the connection before answering", answered=False
            )
        try:
            response = parse_response_head(raw, request_method=head.method)
        except HTTPParseError as exc:
            raise UpstreamFailed(str(exc), answered=False) from exc
        if not response.interim:
            return response
        await _to_client(client, raw)  # 100 Continue, 103 Early Hints: passed on, then the answer


async def _relay_body(
    response: ResponseHead, first: bytes, upstream: Reader, client: ByteStream
) -> bool:
    """Send ``first`` (the head, and any body bytes already read), then the rest of the body;
    True when the upstream connection may carry another request."""
    kind = response.body
    if kind is BodyKind.NONE:
        await _to_client(client, first)
        return True
    if kind is BodyKind.LENGTH:
        left = response.length
        data = upstream.take(left)
        left -= len(data)
        await _to_client(client, first + data)
        while left > 0:
            data = await _from_upstream(upstream, left, True)
            left -= len(data)
            await _to_client(client, data)
        return True
    if kind is BodyKind.CHUNKED:
        scanner = ChunkedScanner()
        data = upstream.take(READ_SIZE)
        while True:
            try:
                used = scanner.feed(data)
            except HTTPParseError as exc:
                raise UpstreamFailed(str(exc), answered=True) from exc
            await _to_client(client, first + data[:used])
            first = b""
            if scanner.done:
                return used == len(data)  # bytes past the end: do not trust the connection again
            data = await _from_upstream(upstream, READ_SIZE, True)
    # UNTIL_CLOSE: the body ends when the engine closes its side
    await _to_client(client, first + upstream.take(READ_SIZE))
    while True:
        try:
            data = await upstream.some(READ_SIZE)
        except anyio.EndOfStream:
            return False
        except _LOST as exc:
            raise UpstreamFailed(repr(exc), answered=True) from exc
        await _to_client(client, data)


async def relay_exchange(
    head: RequestHead,
    client_reader: Reader,
    client: ByteStream,
    upstream_reader: Reader,
    *,
    close_after: bool,
) -> tuple[bool, bool]:
    """Relay one request and its answer; returns (client keep-alive, upstream reusable).

    With ``close_after`` (the gate is draining) the answer carries ``Connection: close``.
    """
    upstream = upstream_reader.stream
    try:
        await upstream.send(head.raw)
    except _LOST as exc:
        raise UpstreamFailed(repr(exc), answered=False) from exc
    if head.body is BodyKind.NONE:
        response = await _response_head(head, upstream_reader, client)
        return await _finish(head, response, upstream_reader, client, close_after)
    # The body goes up while the answer comes down: an engine may answer before reading it all
    # (413, or after a 100 Continue the client waits for).
    result: tuple[bool, bool] | None = None
    failure: BaseException | None = None
    pumped = False

    async def pump() -> None:
        nonlocal failure, pumped
        try:
            await _pump_request_body(head, client_reader, upstream)
            pumped = True
        except (ClientGone, UpstreamFailed) as exc:
            failure = exc
            scope.cancel()

    async with anyio.create_task_group() as tg:
        scope = tg.cancel_scope
        tg.start_soon(pump)
        try:
            response = await _response_head(head, upstream_reader, client)
            result = await _finish(head, response, upstream_reader, client, close_after)
        except (ClientGone, UpstreamFailed) as exc:
            failure = failure or exc
        scope.cancel()  # answered: a body the engine did not read is not pumped on
    if failure is not None:
        raise failure
    assert result is not None
    if not pumped:  # the rest of the body is still on its way: neither side can be reused
        return False, False
    return result


async def _finish(
    head: RequestHead,
    response: ResponseHead,
    upstream: Reader,
    client: ByteStream,
    close_after: bool,
) -> tuple[bool, bool]:
    keep = head.keep_alive and response.keep_alive and not close_after
    raw = response.raw
    if not keep and response.keep_alive and head.keep_alive:
        raw = with_connection_close(response)
    reusable = await _relay_body(response, raw, upstream, client)
    # After a HEAD, a server that wrongly sent a body would garble the next answer: a new
    # connection costs less than finding out.
    return keep, reusable and response.keep_alive and head.method != b"HEAD"
