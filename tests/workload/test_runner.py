"""serve_with_drain over a real socket (uvicorn on 127.0.0.1, ephemeral port), and the handler."""

from __future__ import annotations

import errno
import os
import signal
import socket
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from asyncdeploy.workload import (
    DrainController,
    DrainMiddleware,
    DrainState,
    PropagationWindow,
    TerminationRequest,
    control_request,
    install_sigterm_handler,
)
from asyncdeploy.workload.demo import DemoApp
from asyncdeploy.workload.runner import ServeOptions, serve_with_drain

pytestmark = pytest.mark.anyio


async def test_termination_drains_an_open_stream_then_stops_uvicorn(sse: Any) -> None:
    """Over TCP, refusing at once: the stream finishes with done, newcomers get 503, then the
    server exits."""
    controller = DrainController(drain_timeout=10, propagation=PropagationWindow.refuse_at_once())
    termination = TerminationRequest(controller)
    app = DrainMiddleware(DemoApp(), controller, retry_after=2)
    options = ServeOptions(port=0, handle_signals=False, log_level="warning")
    result: dict[str, Any] = {}

    async def serve(*, task_status: Any) -> None:
        result["stats"] = await serve_with_drain(
            app, controller, options, termination=termination, task_status=task_status
        )

    async with anyio.create_task_group() as tg:
        address = await tg.start(serve)
        controller.mark_started()
        base = f"http://127.0.0.1:{address.port}"
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=5) as client:
            assert (await client.get("/ready")).status_code == 200
            async with client.stream("GET", "/stream?tokens=8&pace=0.05") as response:
                lines = response.aiter_lines()
                assert (await anext(lines)).startswith("id: 0")
                termination.request("test")  # what SIGTERM does
                async with httpx.AsyncClient(base_url=base, trust_env=False) as other:
                    late = await other.get("/short")
                    ready = await other.get("/ready")
                    live = await other.get("/live")
                body = "id: 0\n" + "\n".join([line async for line in lines]) + "\n"
    events = sse(body.encode())
    assert [name for name, _ in events] == ["token"] * 8 + ["done"]
    assert late.status_code == 503
    assert late.headers["retry-after"] == "2"
    assert late.headers["connection"] == "close"
    assert (ready.status_code, live.status_code) == (503, 200)
    stats = result["stats"]
    assert stats.state is DrainState.STOPPED
    assert (stats.completed, stats.cut_at_deadline, stats.in_flight) == (1, 0, 0)
    assert stats.rejected_while_draining == 1  # /short; probes are not work


async def test_sigterm_handler_requests_termination(controller: DrainController) -> None:
    """A real SIGTERM begins the drain; a repeated SIGTERM (an engine retrying its stop) is
    ignored; a SIGINT after it (the operator's Ctrl-C) cuts."""
    signals = (signal.SIGTERM, signal.SIGINT)
    with install_sigterm_handler(controller, signals=signals) as handlers:
        os.kill(os.getpid(), signal.SIGTERM)
        with anyio.fail_after(2):
            await handlers.termination.wait()
        assert controller.state is DrainState.DRAINING
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        with anyio.move_on_after(0.5) as still_draining:
            await controller.wait_cut()
        assert still_draining.cancelled_caught  # the streams were not cut
        assert handlers.termination.ignored == 2
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(2):
            assert await controller.wait_cut() == "forced"
    assert handlers.termination.count == 4
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_a_repeated_sigterm_cuts_when_asked_to(controller: DrainController) -> None:
    """repeated_sigterm="cut": the old behaviour, for a supervisor whose second TERM means now."""
    termination = TerminationRequest(controller, repeated_sigterm="cut")
    with install_sigterm_handler(controller, termination=termination, signals=(signal.SIGTERM,)):
        os.kill(os.getpid(), signal.SIGTERM)
        with anyio.fail_after(2):
            await termination.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        with anyio.fail_after(2):
            assert await controller.wait_cut() == "forced"


async def test_an_unexpected_accept_error_leaves_uvicorn_and_the_socket_serving(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An accept() error of the control socket (EPROTO here) is logged and retried: it never
    ends the control socket's task, which would take uvicorn down with it."""
    sock = tmp_path / "run" / "c.sock"
    real_accept = socket.socket.accept
    failures = [OSError(errno.EPROTO, "Protocol error")] * 2

    def flaky_accept(self: socket.socket) -> Any:
        if self.family == socket.AF_UNIX and failures:
            raise failures.pop()
        return real_accept(self)

    monkeypatch.setattr(socket.socket, "accept", flaky_accept)
    controller = DrainController(propagation=PropagationWindow.refuse_at_once())
    app = DrainMiddleware(DemoApp(), controller)
    options = ServeOptions(port=0, control_socket=str(sock), log_level="warning")
    async with anyio.create_task_group() as tg:
        address = await tg.start(serve_with_drain, app, controller, options)
        controller.mark_started()
        with anyio.fail_after(5):
            reply = await control_request(sock, "status")
        assert reply["status"]["state"] == "serving"
        assert not failures  # both errors happened
        async with httpx.AsyncClient(trust_env=False) as client:
            ready = await client.get(f"http://127.0.0.1:{address.port}/ready")
        assert ready.status_code == 200
        tg.cancel_scope.cancel()
