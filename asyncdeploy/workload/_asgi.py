"""ASGI type aliases and tiny response helpers shared by the middleware and the demo."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]

#: Scope extension set by ``serve_with_drain``'s uvicorn protocol: a callable answering whether
#: the client has already sent further (pipelined) requests on this connection.
PIPELINED_EXTENSION = "asyncdeploy.requests_queued"


def requests_queued(scope: Scope) -> bool:
    """True when the server says more requests wait on this connection (HTTP/1.1 pipelining)."""
    check = scope.get("extensions", {}).get(PIPELINED_EXTENSION)
    return bool(check()) if callable(check) else False


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """Return the first value of header ``name`` (lower-case), or None."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"application/json",
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send a complete, non-streamed response."""
    headers: Headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def json_bytes(data: object) -> bytes:
    """Compact JSON, UTF-8 encoded."""
    return json.dumps(data, separators=(",", ":")).encode()
