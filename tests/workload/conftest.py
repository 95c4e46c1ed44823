"""Fixtures for the drain-kit tests: an in-process ASGI driver that sees every frame.

httpx.ASGITransport buffers whole responses, so streaming behaviour (frame timing, the final
write, a disconnect mid-stream) is driven through :class:`Exchange` instead.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from asyncdeploy.workload import DrainController, DrainMiddleware, PropagationWindow
from asyncdeploy.workload.demo import DemoApp


class Exchange:
    """One HTTP request/response with an ASGI app, observed message by message."""

    def __init__(self, app: Any, target: str, *, headers: dict[str, str] | None = None) -> None:
        path, _, query = target.partition("?")
        self.app = app
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
        }
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self.complete = False
        #: When set, the send of the final frame blocks until this event is set.
        self.final_gate: anyio.Event | None = None
        self.final_send_entered = anyio.Event()
        self.final_send_returned = anyio.Event()
        self._disconnect = anyio.Event()
        self._progress = anyio.Event()
        self._request_sent = False

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def disconnect(self) -> None:
        self._disconnect.set()

    async def run(self) -> Exchange:
        await self.app(self.scope, self._receive, self._send)
        return self

    async def wait_chunks(self, count: int) -> None:
        while len(self.chunks) < count:
            event = self._progress
            await event.wait()

    async def _receive(self) -> dict[str, Any]:
        if not self._request_sent:
            self._request_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._disconnect.wait()  # like uvicorn: blocks until the client goes away
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if self._disconnect.is_set():
            return  # like uvicorn: writes after a disconnect are dropped
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.lower(): v for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            last = not message.get("more_body", False)
            if last and self.final_gate is not None:
                self.final_send_entered.set()
                await self.final_gate.wait()
            self.chunks.append(message.get("body", b""))
            if last:
                self.complete = True
                self.final_send_returned.set()
        self._progress.set()
        self._progress = anyio.Event()


@pytest.fixture
def controller() -> DrainController:
    """A controller that is already SERVING and refuses new work as soon as it drains."""
    controller = DrainController(drain_timeout=None, propagation=PropagationWindow.refuse_at_once())
    controller.mark_started()
    return controller


@pytest.fixture
def demo(controller: DrainController) -> DrainMiddleware:
    """The demo app behind the drain middleware."""
    return DrainMiddleware(DemoApp(), controller, retry_after=7)


@pytest.fixture
def exchange() -> type[Exchange]:
    """The :class:`Exchange` class (conftest modules are not importable by the tests)."""
    return Exchange


def parse_sse(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of every SSE event in ``body``; a trailing partial event is dropped."""
    import json

    events = []
    for block in body.split(b"\n\n")[:-1]:
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        events.append((fields.get(b"event", b"message").decode(), json.loads(fields[b"data"])))
    return events


@pytest.fixture
def sse() -> Any:
    """The SSE parser."""
    return parse_sse
