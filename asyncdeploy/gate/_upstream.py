"""The gate's connection to the engine: one answer at a time, parsed by llhttp, relayed back.

Split from :mod:`._client` (the client side); the two meet through :class:`Client`, what an
answer needs of the connection it goes back to, so neither module imports the other's class.
Every byte from the engine is fed to ``httptools.HttpResponseParser``. A read whose every byte
goes on unchanged (body bytes, whole heads that keep their Connection field) is written as it
came; otherwise what goes to the client is rebuilt from what llhttp parsed (:mod:`._http`): the
head (with ``Connection: close`` when the client connection ends after it), the body (re-chunked
when chunked), the trailers. One write per read. Bytes past the end of an answer are never
passed on, and the connection is not used again.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools

from ._http import Framing, HeaderFields, chunk, framing_of, last_chunk, response_head

__all__ = ["WRITE_HIGH", "Client", "UpstreamConnection"]

WRITE_HIGH = 64 * 1024
"""A transport holding more than this unsent pauses the side that feeds it."""
_FRAMING_SIZES = frozenset((len(b"content-length"), len(b"transfer-encoding")))


class Client(Protocol):
    """What an answer needs of the client connection it is relayed to."""

    def keep_for(self, keep_alive: bool) -> bool: ...
    def write_answer(self, data: bytes) -> None: ...
    def response_complete(self, *, reusable: bool) -> None: ...
    def upstream_failed(self, reason: str, *, answered: bool, untouched: bool) -> None: ...
    def upstream_full(self, full: bool) -> None: ...
    def switched(self, rest: bytes) -> bool: ...
    def tunnel_closed(self) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """The gate's connection to the engine: one answer at a time, back to its client."""

    __slots__ = (
        "_complete",
        "_declared",
        "_framing",
        "_headers",
        "_in_head",
        "_interim",
        "_keep_alive",
        "_method",
        "_out",
        "_parser",
        "_paused",
        "_reason",
        "_received",
        "_stray",
        "_trailers",
        "_tunnel",
        "_verbatim",
        "answered",
        "client",
        "closed",
        "transport",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.client: Client | None = None
        self.closed = False
        self.answered = False  # the answer's head went to the client
        self._parser = httptools.HttpResponseParser(self)
        self._method = b"GET"
        self._headers: HeaderFields = []
        self._trailers: HeaderFields = []
        self._reason = b""
        self._framing = Framing.NONE
        self._declared = False  # the answer's head has a Content-Length or Transfer-Encoding
        #: this read's parts: body bytes, a head to build (tuple), the last chunk's trailers
        self._out: list[bytes | tuple[str, int, bytes, HeaderFields, bool] | HeaderFields] = []
        self._verbatim = True  # this read goes on as it came
        self._in_head = False  # the parser is inside a head (its first part came already)
        self._received = False  # the engine sent a byte of this answer
        self._interim = False  # the message being parsed is a 1xx before the answer
        self._complete = False
        self._keep_alive = False  # llhttp's verdict at the answer's end (it resets after)
        self._stray = False  # the engine sent bytes past its answer
        self._tunnel = False
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without deriving from it
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH)

    def start(self, client: Client, method: bytes) -> None:
        self.client = client
        self._method = method
        self.answered = self._received = self._complete = False
        self.resume()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    # --- the transport's callbacks --------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        client = self.client
        if client is None:  # bytes between exchanges: this connection cannot be trusted again
            self.close()
            return
        if self._tunnel:
            client.write_answer(data)
            return
        self._received = True
        self._verbatim = not self._in_head  # a read that starts inside a head is rebuilt
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            offset = upgrade.args[0]
            self._flush(client, data[:offset])
            self._tunnel = client.switched(data[offset:])
            if not self._tunnel:
                self._fail(client, "a 101 answer to a request that asked for no upgrade")
            return
        except httptools.HttpParserError as exc:
            self._verbatim = False  # what llhttp parsed before the error, not the rest
            self._flush(client, data)
            self._fail(client, f"bad answer: {exc}")
            return
        self._flush(client, data)
        if self._complete and self.client is client:
            self._complete = False
            reusable = (
                not self._stray
                and self._method != b"HEAD"  # its body, if the engine sent one, is unparsed
                and self._framing is not Framing.UNTIL_CLOSE
                and self._keep_alive
            )
            client.response_complete(reusable=reusable)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost tells an until-close body's end

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        client, self.client = self.client, None
        if client is None:
            return
        if self._tunnel:
            client.tunnel_closed()
            return
        if self.answered and self._framing is Framing.UNTIL_CLOSE and exc is None:
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

    # --- llhttp's callbacks ---------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.answered and not self._interim:
            self._stray = True  # a second message after the answer: nobody asked for it
            self._verbatim = False
        self._headers, self._trailers, self._reason = [], [], b""
        self._interim = self._declared = False
        self._in_head = True

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._stray:
            return
        if self.answered and not self._interim:
            self._trailers.append((name, value))
        else:
            self._headers.append((name, value))
            if len(name) in _FRAMING_SIZES:
                self._declared = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        client = self.client
        if self._stray or client is None:
            return
        parser = self._parser
        status = parser.get_status_code()
        version = parser.get_http_version()
        if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: passed on
            self._interim = True
            self._out.append((version, status, self._reason, self._headers, False))
            return
        if status == 101 or self._method == b"HEAD" or status in (204, 304):
            self._framing = Framing.NONE
        elif self._declared:
            self._framing = framing_of(self._headers, response=True)[0]
        else:
            self._framing = Framing.UNTIL_CLOSE
        keep = status == 101 or client.keep_for(
            parser.should_keep_alive() and self._framing is not Framing.UNTIL_CLOSE
        )
        self._out.append((version, status, self._reason, self._headers, not keep))
        if not keep:
            self._verbatim = False  # the head gets Connection: close
        self.answered = True
        if self._method == b"HEAD" and status != 101:
            self._complete = True  # llhttp would wait for the GET's body: the answer ends here

    def on_body(self, body: bytes) -> None:
        if self._stray or (self._complete and self._method == b"HEAD"):
            self._verbatim = False  # (a body after a HEAD's answer: never passed on)
            return
        self._out.append(body)

    def on_message_complete(self) -> None:
        if self._stray:
            return
        if self._interim:
            self._interim = False
            self.answered = False
            return
        if self._framing is Framing.CHUNKED:
            self._out.append(self._trailers)
        self._keep_alive = self._parser.should_keep_alive()
        self._complete = True

    # --- internals ---------------------------------------------------------------------------
    def _flush(self, client: Client, data: bytes) -> None:
        """Write this read on: as it came, or rebuilt from its parts."""
        out = self._out
        if not out:
            return
        # Only where body bytes are the bytes on the wire: a chunked body is always re-chunked,
        # so a read rebuilt after one sent as it came never splits a chunk's framing.
        if self._verbatim and not self._in_head and self._framing is not Framing.CHUNKED:
            client.write_answer(data)
        else:
            chunked = self._framing is Framing.CHUNKED
            parts = []
            for part in out:
                if isinstance(part, bytes):
                    parts.append(chunk(part) if chunked else part)
                elif isinstance(part, tuple):
                    version, status, reason, headers, close = part
                    parts.append(response_head(version, status, reason, headers, close=close))
                else:
                    parts.append(last_chunk(part))
            client.write_answer(b"".join(parts))
        out.clear()

    def _fail(self, client: Client, reason: str) -> None:
        answered = self.answered
        self.abort()
        client.upstream_failed(reason, answered=answered, untouched=False)

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
