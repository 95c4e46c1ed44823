"""A receive buffer over an anyio byte stream: the gate's health check and ``drain`` command.

Neither is on the hot path (one request a check interval, one a drain), so they use anyio's
streams; the relay itself is :mod:`._client`'s and :mod:`._upstream`'s protocols.
"""

from __future__ import annotations

import anyio
from anyio.abc import ByteReceiveStream

from ._http import MAX_HEAD

__all__ = ["Reader"]

READ_SIZE = 65536


class Reader:
    """Reads heads and bodies from a stream, keeping bytes past what was asked for."""

    __slots__ = ("_buffer", "stream")

    def __init__(self, stream: ByteReceiveStream) -> None:
        self.stream = stream
        self._buffer = b""

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
                raise ValueError(f"head longer than {MAX_HEAD} bytes")
            start = max(0, len(buffer) - 3)
            try:
                data = await self.stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                if buffer.strip():
                    raise ValueError("connection closed inside a head") from None
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
