"""The controller's own answers and the status of the few answers it reads (pure functions).

Framing is HAProxy's: the controller writes only its own answers (to HAProxy, which forwards
them) and reads only the heads of the engine's health check and of the ``drain`` command.
"""

from __future__ import annotations

import json
import re

__all__ = [
    "MAX_HEAD",
    "REASONS",
    "answer",
    "grpc_health_answer",
    "grpc_health_watch_start",
    "status_of",
]

MAX_HEAD = 64 * 1024
"""The largest head the controller reads (the engine's health answer, the drain's answer)."""

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


# grpc.health.v1.HealthCheckResponse's one field, ``status`` (field 1, a varint): SERVING = 1,
# NOT_SERVING = 2; in gRPC's length-prefixed frame (no compression, 4-byte big-endian length)
_HEALTH_STATUS = {True: b"\x08\x01", False: b"\x08\x02"}


def grpc_health_answer(serving: bool) -> bytes:
    """A whole ``grpc.health.v1.Health/Check`` answer in HTTP/1.1, as HAProxy passes it on to
    the client in HTTP/2: the response message in one chunk, then ``grpc-status: 0`` as a
    trailer (gRPC reads the call's status from the trailers)."""
    return grpc_health_watch_start(serving) + b"0\r\ngrpc-status: 0\r\n\r\n"


def grpc_health_watch_start(serving: bool) -> bytes:
    """The start of a ``grpc.health.v1.Health/Watch`` answer: the head and one message, the
    stream left open (a Watch that ends is asked again at once by gRPC's health clients,
    which back off only after an attempt that brought no message)."""
    message = _HEALTH_STATUS[serving]
    frame = b"\x00" + len(message).to_bytes(4, "big") + message
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        + b"%x\r\n" % len(frame)
        + frame
        + b"\r\n"
    )
