"""llhttp's request callbacks made into exchanges: what a client connection reads.

Every byte a client sends is fed to ``httptools.HttpRequestParser`` (llhttp) through
:meth:`RequestReader.feed`; its callbacks build one :class:`~._exchange.Exchange` per request,
appended to the connection's queue when its head is complete, and hand each piece of its body
to the connection framed as it goes to the engine (the last chunk and trailers included).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

from ._exchange import Exchange, ExchangePhase
from ._http import MAX_HEAD

__all__ = ["RequestReader"]

_FRAMING_SIZES = frozenset((len(b"content-length"), len(b"transfer-encoding")))


class RequestReader:
    """The parser of one client connection and the request it is reading (``parsing``)."""

    __slots__ = ("_parser", "_queue", "_send", "parsing")

    def __init__(self, queue: deque[Exchange], send: Callable[[Exchange, bytes], None]) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._queue = queue
        self._send = send  # (exchange, body bytes as they go to the engine)
        self.parsing: Exchange | None = None

    def feed(self, data: bytes | memoryview) -> None:
        """Parse ``data``; raises ``httptools.HttpParserError`` (the request is malformed) and
        ``httptools.HttpParserUpgrade`` (what follows is not HTTP, or not yet)."""
        self._parser.feed_data(data)

    # --- llhttp's callbacks ---------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        exchange = self.parsing
        if exchange is None:  # a request's first callback (on_message_begin would cost a call)
            exchange = self.parsing = Exchange(time.monotonic())
        exchange.target += url
        exchange.head_size += len(url)
        if exchange.head_size > MAX_HEAD:
            _too_large(exchange)

    def on_header(self, name: bytes, value: bytes) -> None:
        exchange = cast(Exchange, self.parsing)
        exchange.head_size += len(name) + len(value) + 4
        if exchange.head_size > MAX_HEAD:
            _too_large(exchange)
        if exchange.phase is ExchangePhase.PARSING:
            exchange.headers.append((name, value))
            if len(name) in _FRAMING_SIZES:  # Content-Length, Transfer-Encoding (framing_of)
                exchange.declared = True
        else:
            exchange.trailers.append((name, value))

    def on_headers_complete(self) -> None:
        exchange = cast(Exchange, self.parsing)
        parser = self._parser
        exchange.head_complete(
            parser.get_method(),
            parser.get_http_version(),
            parser.should_keep_alive(),
            parser.should_upgrade(),
        )
        self._queue.append(exchange)

    def on_body(self, body: bytes) -> None:
        exchange = cast(Exchange, self.parsing)
        self._send(exchange, exchange.frame(body))

    def on_message_complete(self) -> None:
        exchange = cast(Exchange, self.parsing)
        self.parsing = None
        exchange.received = True
        end = exchange.end()
        if end:
            self._send(exchange, end)


def _too_large(exchange: Exchange) -> None:
    exchange.error = (431, f"request head longer than {MAX_HEAD} bytes")
    raise ValueError(exchange.error[1])  # llhttp stops; the connection answers it in turn
