"""The control socket under abuse: idle connection floods, descriptor exhaustion, silent peers,
and sockets someone else could have swapped."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

import asyncdeploy
from asyncdeploy.workload import (
    ControlSocketError,
    DrainController,
    DrainState,
    run_drain_command,
    serve_control_socket,
)

_ROOT = str(Path(asyncdeploy.__file__).resolve().parent.parent)
_ENV = {**os.environ, "PYTHONPATH": _ROOT, "PYTHONUNBUFFERED": "1"}
_AS_ROOT = os.geteuid() == 0
_NOBODY = 65534


# Runs ``python -m MODULE ARGS`` with at most LIMIT file descriptors, like ``ulimit -n LIMIT``
# (set in the child itself: a preexec_fn is unsafe in a process that may have threads).
_LIMITED = (
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]),) * 2); "
    "sys.argv = sys.argv[2:]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def _limited(limit: int, module: str, *args: str) -> list[str]:
    return [sys.executable, "-c", _LIMITED, str(limit), module, *args]


@contextmanager
def _process(command: list[str], log: Path, ready: str) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_ENV)
    try:
        deadline = time.monotonic() + 15
        while ready not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _connect(path: Path, within: float = 10) -> socket.socket:
    """Connect, retrying while the listen backlog is full (AF_UNIX says EAGAIN then)."""
    deadline = time.monotonic() + within
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            assert time.monotonic() < deadline, "the listen backlog stayed full"
            time.sleep(0.02)
        except BaseException:
            sock.close()
            raise


def _open_idle(path: Path, count: int) -> list[socket.socket]:
    """``count`` connections that never send a byte."""
    idle: list[socket.socket] = []
    try:
        for _ in range(count):
            idle.append(_connect(path))
    except BaseException:
        for sock in idle:
            sock.close()
        raise
    return idle


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_300_idle_connections_leave_the_demo_serving_and_draining(tmp_path: Path) -> None:
    """Under ulimit -n 256, 300 idle control connections: HTTP answers, a drain still drains."""
    sock, log = tmp_path / "c.sock", tmp_path / "demo.log"
    command = _limited(256, "asyncdeploy.workload.demo", "--host", "127.0.0.1", "--port", "0")
    command += ["--control-socket", str(sock), "--drain-timeout", "10s"]
    with _process(command, log, "demo ready") as process:
        base = re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read_text())
        assert base is not None
        idle = _open_idle(sock, 300)
        try:
            time.sleep(0.5)  # let the server accept (and shed) what it will
            assert process.poll() is None, log.read_text()
            assert _open_fds(process.pid) < 100  # a bounded number of control connections
            with httpx.Client(base_url=base.group(1), trust_env=False, timeout=10) as client:
                assert client.get("/short").status_code == 200
                hook = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "asyncdeploy.workload.drain_cmd",
                        "--socket",
                        str(sock),
                        "--propagation-wait",
                        "0s",
                        "--timeout",
                        "5s",
                    ],
                    env=_ENV,
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                assert hook.returncode == 0, (hook.stderr, log.read_text()[-2000:])
                assert json.loads(hook.stdout)["drained"] is True
                assert client.get("/ready").status_code == 503
        finally:
            for connection in idle:
                connection.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, log.read_text()[-2000:]


_SERVE_SCRIPT = """
import logging, resource, sys, anyio
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
logging.basicConfig(level=logging.INFO)
from asyncdeploy.workload import DrainController, serve_control_socket

async def main():
    controller = DrainController()
    controller.mark_started()
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: serve_control_socket(
            controller, sys.argv[1], idle_timeout=1.0, max_connections=1000,
            task_status=task_status))
        print("listening", flush=True)

anyio.run(main)
"""


def test_descriptor_exhaustion_pauses_accepting_instead_of_crashing(tmp_path: Path) -> None:
    """With 64 descriptors and no connection bound in the way, accept hits EMFILE and goes on."""
    sock, log = tmp_path / "c.sock", tmp_path / "server.log"
    command = [sys.executable, "-c", _SERVE_SCRIPT, str(sock)]
    with _process(command, log, "listening") as process:
        idle = _open_idle(sock, 100)  # more than 64 descriptors
        try:
            with _connect(sock, within=15) as probe:  # in the backlog until idle ones go
                probe.settimeout(15)
                probe.sendall(b"status\n")
                reply = json.loads(probe.makefile("rb").readline())
        finally:
            for connection in idle:
                connection.close()
        assert reply["ok"] is True, log.read_text()
        assert process.poll() is None, log.read_text()
        assert "Too many open files" in log.read_text()


@contextmanager
def _silent_server(path: Path, first_reply: bytes | None = None) -> Iterator[None]:
    """A Unix server that accepts and never answers (after ``first_reply``, if given)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            if first_reply is not None:
                connection.makefile("rb").readline()
                connection.sendall(first_reply)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
        for connection in held:
            connection.close()


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [
        pytest.param(["-m", "asyncdeploy", "drain"], 1, id="cli"),
        pytest.param(["-m", "asyncdeploy.workload.drain_cmd"], 2, id="drain_cmd"),
    ],
)
def test_drain_against_a_silent_socket_ends_at_its_timeout(
    tmp_path: Path, command: list[str], exit_code: int
) -> None:
    """A socket that accepts and never answers: the command ends by --timeout 2s, non-zero."""
    sock = tmp_path / "c.sock"
    with _silent_server(sock):
        start = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                *command,
                "--socket",
                str(sock),
                "--propagation-wait",
                "0s",
                "--timeout",
                "2s",
            ],
            env=_ENV,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        elapsed = time.monotonic() - start
    assert result.returncode == exit_code, result.stderr
    assert "no answer to drain within 2 s" in result.stderr
    assert "Traceback" not in result.stderr
    assert 1.9 < elapsed < 8  # 2 s plus an interpreter start on a loaded machine


_DRAINING = (
    json.dumps(
        {
            "ok": True,
            "command": "drain",
            "started": True,
            "status": {
                **DrainController().statistics().to_dict(),
                "state": "draining",
                "in_flight": 1,
            },
        }
    ).encode()
    + b"\n"
)


@pytest.mark.anyio
async def test_a_status_that_never_comes_is_bounded_by_the_timeout(tmp_path: Path) -> None:
    """The drain is accepted, then the server goes silent: the command still ends at its timeout."""
    sock = tmp_path / "c.sock"
    with _silent_server(sock, first_reply=_DRAINING):
        start = anyio.current_time()
        with anyio.fail_after(10):
            report = await run_drain_command(sock, propagation_wait=0, timeout=1.0)
        elapsed = anyio.current_time() - start
    assert report.started_drain
    assert report.timed_out and not report.drained
    assert report.final.in_flight == 1
    assert elapsed < 2.5  # a status read is bounded by what is left of the timeout, not by 5 s


# -- who may own the socket ---------------------------------------------------------------
@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """A directory anyone may write to, like a world-writable /run subdirectory."""
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


@pytest.mark.anyio
async def test_server_refuses_a_directory_others_can_write(
    controller: DrainController, shared_dir: Path
) -> None:
    """A 0777 socket directory is refused, saying why; nothing is created in it."""
    with anyio.fail_after(5), pytest.raises(ControlSocketError, match=r"others \(mode 0777\)"):
        await serve_control_socket(controller, shared_dir / "c.sock")
    assert not await anyio.Path(shared_dir / "c.sock").exists()


@pytest.mark.anyio
@pytest.mark.skipif(not _AS_ROOT, reason="chown to another user needs root")
async def test_server_refuses_a_directory_of_another_user(
    controller: DrainController, tmp_path: Path
) -> None:
    """A 0700 directory that belongs to someone else is refused too."""
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, _NOBODY, _NOBODY)
    with anyio.fail_after(5), pytest.raises(ControlSocketError, match=rf"belongs to uid {_NOBODY}"):
        await serve_control_socket(controller, directory / "c.sock")


@pytest.mark.anyio
async def test_client_refuses_a_socket_in_a_directory_others_can_write(shared_dir: Path) -> None:
    """A swapped socket answering "drained" is never believed: the client will not talk to it."""
    drained = (
        json.dumps(
            {
                "ok": True,
                "command": "drain",
                "started": True,
                "status": {
                    **DrainController().statistics().to_dict(),
                    "state": "draining",
                    "drained": True,
                },
            }
        ).encode()
        + b"\n"
    )
    with (
        _silent_server(shared_dir / "c.sock", first_reply=drained),
        pytest.raises(ControlSocketError, match="writable by others"),
    ):
        await run_drain_command(shared_dir / "c.sock", propagation_wait=0, timeout=2)


@pytest.mark.anyio
@pytest.mark.skipif(not _AS_ROOT, reason="chown to another user needs root")
async def test_client_refuses_a_socket_of_another_user(
    controller: DrainController, tmp_path: Path
) -> None:
    """A socket file owned by another uid is not our server's: no drain is requested."""
    path = tmp_path / "run" / "c.sock"
    async with anyio.create_task_group() as tg:
        await tg.start(serve_control_socket, controller, path)
        os.chown(path, _NOBODY, _NOBODY)
        with pytest.raises(ControlSocketError, match=rf"socket belongs to uid {_NOBODY}"):
            await run_drain_command(path, propagation_wait=0, timeout=2)
        tg.cancel_scope.cancel()
    assert controller.state is DrainState.SERVING
