"""The control socket and the drain command client."""

from __future__ import annotations

import functools
import os
import socket
import stat
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.workload import (
    BalancerCheck,
    ControlSocketError,
    ControlSocketInUse,
    DrainController,
    DrainState,
    PropagationWindow,
    control_request,
    run_drain_command,
    serve_control_socket,
)
from asyncdeploy.workload.control import _execute

pytestmark = pytest.mark.anyio


@pytest.fixture
def sock_path(tmp_path: Path) -> str:
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp_path may be long
    path = tmp_path / "run" / "c.sock"
    if len(str(path)) > 100:
        pytest.skip("tmp_path too long for a Unix socket")
    return str(path)


async def test_socket_is_0600_and_answers_drain_and_status(
    controller: DrainController, sock_path: str
) -> None:
    """drain begins the drain once; status reports state and counters; the file goes on exit."""
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
        assert stat.S_IMODE(os.stat(os.path.dirname(sock_path)).st_mode) == 0o700

        status = await control_request(sock_path, "status")
        assert status["status"]["state"] == "serving"
        assert status["status"]["in_flight"] == 0

        first = await control_request(sock_path, "drain")
        second = await control_request(sock_path, "drain")
        assert (first["started"], second["started"]) == (True, False)
        assert controller.state is DrainState.DRAINING
        assert second["status"]["state"] == "draining"

        with pytest.raises(ControlSocketError, match="unknown command"):
            await control_request(sock_path, "reboot")
        tg.cancel_scope.cancel()
    assert not await anyio.Path(sock_path).exists()


async def test_stale_socket_is_replaced_and_a_live_one_is_refused(
    controller: DrainController, sock_path: str
) -> None:
    """A dead process's socket file is taken over; a second server on a live path fails."""
    os.makedirs(os.path.dirname(sock_path))
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(sock_path)  # bound, never listening: what a killed server leaves behind
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)
        assert (await control_request(sock_path, "status"))["ok"] is True
        with pytest.raises(ControlSocketInUse):
            await serve_control_socket(DrainController(), sock_path)
        tg.cancel_scope.cancel()


async def test_run_drain_command_waits_for_in_flight_zero(
    controller: DrainController, sock_path: str
) -> None:
    """The command returns only once the last admitted request is released."""
    admitted = controller.try_admit()
    assert admitted is not None
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)

        async def finish_later() -> None:
            await anyio.sleep(0.4)
            admitted.release()

        tg.start_soon(finish_later)
        with anyio.fail_after(5):
            report = await run_drain_command(sock_path, propagation_wait=0.05, timeout=5)
        assert admitted.released
        tg.cancel_scope.cancel()
    assert report.started_drain
    assert report.drained
    assert not report.timed_out
    assert report.initial.in_flight == 1
    assert report.initial.state is DrainState.DRAINING
    assert report.final.in_flight == 0
    assert report.final.drained
    assert report.propagation_waited >= 0.05
    assert report.elapsed >= 0.35


async def test_run_drain_command_gives_up_at_its_timeout(
    controller: DrainController, sock_path: str
) -> None:
    """Still in flight at the timeout: not drained, timed out, and the drain stays on."""
    assert controller.try_admit() is not None
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)
        with anyio.fail_after(3):
            report = await run_drain_command(sock_path, propagation_wait=10, timeout=0.3)
        tg.cancel_scope.cancel()
    assert report.timed_out
    assert not report.drained
    assert report.final.in_flight == 1
    assert 0.25 < report.elapsed < 2  # the propagation wait was cut short by the timeout
    assert controller.state is DrainState.DRAINING


async def test_unreachable_socket_raises(sock_path: str) -> None:
    """No server: a ControlSocketError naming the path."""
    with pytest.raises(ControlSocketError, match=r"c\.sock: cannot connect"):
        await run_drain_command(sock_path, propagation_wait=0, timeout=1)


async def test_connection_bound_sheds_silent_connections_and_refuses_when_all_speak(
    controller: DrainController, sock_path: str
) -> None:
    """Full of silent peers, a newcomer takes the oldest one's slot; full of talkers, it is refused."""
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(serve_control_socket, controller, sock_path, max_connections=2)
        )
        silent = [await anyio.connect_unix(sock_path) for _ in range(2)]
        with anyio.fail_after(5):
            assert (await control_request(sock_path, "status"))["ok"] is True
            with pytest.raises(anyio.EndOfStream):  # the oldest silent one was closed for it
                await silent[0].receive()
        talkers = []
        for _ in range(2):
            talker = await anyio.connect_unix(sock_path)
            await talker.send(b"status\n")
            assert b'"ok":true' in await talker.receive()
            talkers.append(talker)
        with pytest.raises(ControlSocketError, match="busy: 2 control connections are in use"):
            await control_request(sock_path, "status")
        for stream in silent + talkers:
            await stream.aclose()
        tg.cancel_scope.cancel()


async def test_a_silent_connection_is_closed_after_the_idle_timeout(
    controller: DrainController, sock_path: str
) -> None:
    """A connection that never sends a line is dropped, freeing its slot."""
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(serve_control_socket, controller, sock_path, idle_timeout=0.3)
        )
        silent = await anyio.connect_unix(sock_path)
        with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
            await silent.receive()
        await silent.aclose()
        tg.cancel_scope.cancel()


async def test_a_client_that_never_reads_is_closed_once_replies_stall(
    controller: DrainController, sock_path: str
) -> None:
    """Replies piling up unread for the idle timeout end the connection (its slot is freed)."""
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(serve_control_socket, controller, sock_path, idle_timeout=0.5)
        )
        greedy = await anyio.connect_unix(sock_path)
        sent = 0
        with anyio.move_on_after(3):  # until both buffers are full, or the server hangs up
            while True:
                try:
                    await greedy.send(b"status\n")
                except anyio.BrokenResourceError:
                    break
                sent += 1
        await anyio.sleep(1)  # the server's reply has been stuck longer than 0.5 s
        received = b""
        with anyio.fail_after(10):
            while True:
                try:
                    received += await greedy.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
        await greedy.aclose()
        assert 0 < received.count(b"\n") < sent  # closed before answering everything
        assert (await control_request(sock_path, "status"))["ok"] is True
        tg.cancel_scope.cancel()


async def test_drain_command_reports_the_window_the_server_observed(sock_path: str) -> None:
    """Without --propagation-wait the server's window applies, closed early by the balancer
    check the command declares; the report says how it closed."""
    controller = DrainController(propagation=PropagationWindow(max_seconds=30, quiet_seconds=0.2))
    controller.mark_started()
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)

        async def balancer() -> None:
            await controller.wait_drained(0.05)  # the drain has begun by now
            controller.check_ready()  # its probe sees the drain
            admitted = controller.try_admit()  # one last request in flight to the server
            assert admitted is not None
            admitted.release()

        tg.start_soon(balancer)
        with anyio.fail_after(10):
            report = await run_drain_command(
                sock_path, None, 10, balancer=BalancerCheck(interval=0.1, fall=2)
            )
        tg.cancel_scope.cancel()
    assert report.drained
    assert report.final.window_close_reason == "balancer-check"
    assert (report.final.balancer_interval, report.final.balancer_fall) == (0.1, 2)
    assert report.final.admitted_while_draining == 1
    assert report.propagation_observed is not None and 0 < report.propagation_observed < 2
    # ended once the check had certainly taken it out (2 x 0.1 s + 1 s), not at the 30 s max
    assert 1.2 <= report.propagation_waited < 5
    data = report.to_dict()
    assert data["window_close_reason"] == "balancer-check"
    assert data["propagation_observed"] == report.propagation_observed


async def test_a_propagation_wait_longer_than_the_idle_timeout_still_drains(
    sock_path: str,
) -> None:
    """The command keeps talking while it waits, so the socket's idle timeout never ends it."""
    controller = DrainController(propagation=PropagationWindow(max_seconds=30))
    controller.mark_started()
    admitted = controller.try_admit()
    assert admitted is not None
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(serve_control_socket, idle_timeout=0.3), controller, sock_path
        )

        async def finish_later() -> None:
            await anyio.sleep(1.5)
            admitted.release()

        tg.start_soon(finish_later)
        with anyio.fail_after(10):
            report = await run_drain_command(sock_path, propagation_wait=1.0, timeout=8)
        tg.cancel_scope.cancel()
    assert report.error is None, report.error
    assert report.drained, report
    assert report.final.window_close_reason == "max"
    assert 0.9 <= report.propagation_waited < 5
    assert report.elapsed >= 1.4


@pytest.mark.parametrize(
    "command", ["drain propagation=", "drain propagation=-1", "drain propagation=nan", "drain x=1"]
)
async def test_bad_drain_arguments_are_refused(
    controller: DrainController, sock_path: str, command: str
) -> None:
    """A malformed argument is an error line and begins no drain."""
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)
        with pytest.raises(ControlSocketError, match="drain: "):
            await control_request(sock_path, command)
        tg.cancel_scope.cancel()
    assert controller.state is DrainState.SERVING


@given(command=st.text(max_size=60))
def test_any_command_line_gets_a_reply_and_never_raises(command: str) -> None:
    """The command parser: whatever a line says, the reply is a dict with ok, and a drain only
    begins for a well-formed drain command."""
    controller = DrainController(propagation=PropagationWindow(max_seconds=5))
    controller.mark_started()
    reply = _execute(controller, command.strip())
    assert isinstance(reply["ok"], bool)
    words = command.split()
    if not reply["ok"]:
        assert controller.state is DrainState.SERVING
        assert "error" in reply
    elif words and words[0] == "drain":
        assert controller.state is DrainState.DRAINING
        assert controller.propagation.max_seconds == 5  # the server's own setting is untouched


async def test_traffic_left_told_on_the_socket_closes_the_window_after_the_margin(
    sock_path: str,
) -> None:
    """``traffic-left`` (what the Kubernetes driver sends on TrafficLeft): the window closes
    once kube-proxy's margin passed and no request came for the quiet period; told before the
    drain began, it counts from when it was told."""
    window = PropagationWindow(max_seconds=30, quiet_seconds=0.2, endpoints_margin=0.3)
    controller = DrainController(propagation=window)
    controller.mark_started()
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, sock_path)
        reply = await control_request(sock_path, "traffic-left")
        assert reply["ok"] is True and reply["command"] == "traffic-left"
        assert controller.accepting  # not draining yet: nothing changes but the record
        await anyio.sleep(0.1)
        with anyio.fail_after(10):
            report = await run_drain_command(sock_path, None, 10)
        tg.cancel_scope.cancel()
    assert report.drained and report.final.window_close_reason == "traffic-left"
    assert report.final.traffic_left_after is not None and report.final.traffic_left_after < 0
    assert report.propagation_waited < 2  # not the 30 s maximum


@pytest.mark.parametrize(
    "line",
    [
        "drain balancer-fall=3",
        "drain balancer-interval=0",
        "drain balancer-interval=nan",
        "drain balancer-interval=2 balancer-fall=0",
        "drain balancer-interval=2 balancer-fall=x",
        "drain balancer-interval=2 sometimes=1",
    ],
)
def test_a_malformed_balancer_check_is_refused_and_changes_nothing(line: str) -> None:
    controller = DrainController()
    controller.mark_started()
    reply = _execute(controller, line)
    assert reply["ok"] is False and reply["error"].startswith("drain: "), reply
    assert controller.state is DrainState.SERVING
