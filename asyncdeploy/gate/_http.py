"""The bytes the gate writes: heads, chunks and its own answers, built from what llhttp parsed.

Framing is llhttp's (through ``httptools``, :mod:`._client` and :mod:`._upstream` feed it every
byte); what the gate sends on is rebuilt from the parsed message in one canonical form: the
start line, the header fields as received, a body framed the way the message declared it
(``Content-Length`` bodies byte for byte, chunked ones re-chunked, trailers kept). So the engine
and the client can only ever see the message boundaries llhttp saw: a smuggling-style message
either is refused by llhttp or reaches the other side framed unambiguously. Pure functions.
"""

from __future__ import annotations

import enum
import json
import re

__all__ = [
    "MAX_HEAD",
    "REASONS",
    "Framing",
    "HeaderFields",
    "answer",
    "chunk",
    "framing_of",
    "last_chunk",
    "request_head",
    "response_head",
    "status_of",
]

MAX_HEAD = 64 * 1024
"""The largest head (start line plus header fields) the gate accepts (Envoy: 60 KiB)."""

REASONS = {
    200: b"OK",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}

HeaderFields = list[tuple[bytes, bytes]]  # (name as received, value), in order


class Framing(enum.IntEnum):
    """How a message's body ends (RFC 9112 section 6)."""

    NONE = 0
    LENGTH = 1
    CHUNKED = 2
    UNTIL_CLOSE = 3  # a response without a length: its end is the connection's


def framing_of(headers: HeaderFields, *, response: bool) -> tuple[Framing, int]:
    """The framing llhttp accepted for these headers: it refuses both ``Transfer-Encoding``
    and ``Content-Length``, a request coding that does not end with chunked, and conflicting
    lengths, so what is left is unambiguous."""
    length = -1
    for name, value in headers:
        size = len(name)  # compared first: most fields are neither (measured, per request)
        if size == 17 and name.lower() == b"transfer-encoding":
            if value.rsplit(b",", 1)[-1].strip().lower() == b"chunked":
                return Framing.CHUNKED, 0
            return Framing.UNTIL_CLOSE, 0  # a response coding without chunked: until close
        if size == 14 and name.lower() == b"content-length":
            length = int(value.split(b",", 1)[0])
    if length > 0:
        return Framing.LENGTH, length
    if length == 0 or not response:
        return Framing.NONE, 0
    return Framing.UNTIL_CLOSE, 0


def request_head(method: bytes, target: bytes, version: str, headers: HeaderFields) -> bytes:
    lines = [b"%s %s HTTP/%s\r\n" % (method, target, version.encode())]
    lines += [b"%s: %s\r\n" % field for field in headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def response_head(
    version: str, status: int, reason: bytes, headers: HeaderFields, *, close: bool
) -> bytes:
    """The engine's head as the client gets it (``close``: ``Connection: close`` in place of
    any Connection field, so a keep-alive client reconnects, to another replica)."""
    lines = [b"HTTP/%s %d %s\r\n" % (version.encode(), status, reason)]
    if close:
        lines += [b"%s: %s\r\n" % f for f in headers if f[0].lower() != b"connection"]
        lines.append(b"Connection: close\r\n")
    else:
        lines += [b"%s: %s\r\n" % field for field in headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def last_chunk(trailers: HeaderFields) -> bytes:
    return b"0\r\n" + b"".join(b"%s: %s\r\n" % field for field in trailers) + b"\r\n"


def answer(
    status: int,
    body: object,
    *,
    close: bool = False,
    content_type: bytes = b"application/json",
    extra: bytes = b"",
    method: bytes = b"GET",
) -> bytes:
    """One of the gate's own answers (for a HEAD, its head alone: the GET's length in it)."""
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n" % (
        status,
        REASONS.get(status, b"Unknown"),
        content_type,
        len(data),
        extra,
        b"connection: close\r\n" if close else b"",
    )
    return head if method == b"HEAD" else head + data


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9]{2})(?: [^\r\n]*)?\r\n")


def status_of(head: bytes) -> int:
    """The status of a response head (the health check's, the drain command's)."""
    match = _STATUS_LINE.match(head)
    if match is None:
        raise ValueError(f"not an HTTP/1.x status line: {head[:40]!r}")
    return int(match.group(1))
