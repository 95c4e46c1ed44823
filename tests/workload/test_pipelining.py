"""HTTP/1.1 pipelining: requests queued behind one a drain starts during are all answered."""

from __future__ import annotations

import re
import socket

import anyio
import pytest

from asyncdeploy.workload import DrainController, DrainMiddleware, PropagationWindow
from asyncdeploy.workload.demo import DemoApp
from asyncdeploy.workload.runner import ServeOptions, serve_with_drain

pytestmark = pytest.mark.anyio


def _pipeline(port: int, targets: list[str]) -> bytes:
    """Send every request at once on one connection; read until the server closes it."""
    requests = b"".join(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % t.encode() for t in targets)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(requests)
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    return data


def _responses(data: bytes) -> list[tuple[int, dict[str, str]]]:
    found = []
    for match in re.finditer(rb"HTTP/1\.1 (\d{3}) [^\r]*\r\n((?:[^\r]+\r\n)*)\r\n", data):
        headers = dict(line.split(": ", 1) for line in match.group(2).decode().lower().splitlines())
        found.append((int(match.group(1)), headers))
    return found


@pytest.mark.parametrize("window", ["refuse-at-once", "serving-window"])
async def test_pipelined_requests_behind_a_drain_are_all_answered(window: str) -> None:
    """Three pipelined requests, the drain begins during the first: three answers (main: one,
    the others dropped with the connection); only the last carries Connection: close."""
    propagation = (
        PropagationWindow.refuse_at_once() if window == "refuse-at-once" else PropagationWindow()
    )
    controller = DrainController(drain_timeout=30, propagation=propagation)
    controller.mark_started()
    app = DrainMiddleware(DemoApp(), controller)
    options = ServeOptions(port=0, log_level="warning")
    async with anyio.create_task_group() as tg:
        address = await tg.start(serve_with_drain, app, controller, options)

        async def drain_soon() -> None:
            await anyio.sleep(0.2)  # the first request is in its one second of work
            controller.begin_drain()

        tg.start_soon(drain_soon)
        data = await anyio.to_thread.run_sync(
            _pipeline, address.port, ["/long?seconds=1", "/short", "/short"]
        )
        tg.cancel_scope.cancel()
    answers = _responses(data)
    expected = [200, 503, 503] if window == "refuse-at-once" else [200, 200, 200]
    assert [status for status, _ in answers] == expected, data
    assert [headers.get("connection") for _, headers in answers] == [None, None, "close"]
    if window == "refuse-at-once":
        assert all(headers["retry-after"] == "5" for _, headers in answers[1:])
        assert controller.statistics().rejected_while_draining == 2
