"""Local control socket: a Unix socket (mode 0600) speaking one-line commands.

Requests are lines: ``drain`` (begin the drain, idempotent) or ``status``. Every reply is one
JSON line: ``{"ok": true, "command": ..., "status": {...DrainStatistics...}}``; ``drain`` adds
``"started"`` (whether this command began the drain), errors are ``{"ok": false, "error": ...}``.

:func:`run_drain_command` is the client a preStop hook runs (``python3 -m
asyncdeploy.workload.drain_cmd``): drain, wait for traffic removal to propagate, then wait for
in-flight to reach zero.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import socket
import stat
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from ._asgi import json_bytes
from .errors import ControlSocketError, ControlSocketInUse
from .state import DrainController, DrainStatistics

__all__ = ["DrainReport", "control_request", "run_drain_command", "serve_control_socket"]

logger = logging.getLogger("asyncdeploy.workload")

_MAX_LINE = 1024
_MAX_REPLY = 64 * 1024
_REQUEST_TIMEOUT = 5.0


# -- server -------------------------------------------------------------------------------
async def serve_control_socket(
    controller: DrainController,
    path: str | os.PathLike[str],
    *,
    idle_timeout: float = 60.0,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control socket at ``path`` until cancelled; use with ``TaskGroup.start``.

    The parent directory is created (mode 0700) if missing; a stale socket file left by a dead
    process is replaced, a live one raises :class:`ControlSocketInUse`. The socket file is
    created with mode 0600 and removed on exit.
    """
    path = os.fspath(path)
    await _remove_stale_socket(path)
    raw, inode = _bind_private(path)
    try:
        with raw:
            logger.info("control socket listening on %s", path)
            task_status.started(path)
            async with anyio.create_task_group() as tg:
                while True:
                    client = await _accept(raw)
                    stream = await SocketStream.from_socket(client)
                    tg.start_soon(_handle_connection, controller, stream, idle_timeout)
    finally:
        _unlink_if_ours(path, inode)


# anyio's own Unix listener/streams (raw-socket based) can raise InvalidStateError from a loop
# callback when a pending read is cancelled as data arrives (cf. agronholm/anyio#1267), so raw
# sockets are accepted/connected here and wrapped as transport-based SocketStreams instead.
async def _accept(listening: socket.socket) -> socket.socket:
    while True:
        await anyio.wait_readable(listening)
        try:
            client, _ = listening.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            continue
        client.setblocking(False)
        return client


async def _connect_unix(path: str) -> SocketStream:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        for _ in range(50):
            try:
                sock.connect(path)  # local: completes at once, or EAGAIN if the backlog is full
                break
            except BlockingIOError:
                await anyio.sleep(0.02)
        else:
            raise ConnectionRefusedError(errno.EAGAIN, "listen backlog full")
        return await SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


async def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ControlSocketError(path, "exists and is not a socket")
    try:
        with anyio.fail_after(1):
            stream = await _connect_unix(path)
    except TimeoutError:  # before OSError, its base class
        raise ControlSocketError(path, "an existing socket does not answer") from None
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ControlSocketError(path, f"cannot probe the existing socket: {exc}") from exc
        os.unlink(path)  # nobody listens: a leftover of a dead process
    else:
        await stream.aclose()
        raise ControlSocketInUse(path, "another server is listening")


def _bind_private(path: str) -> tuple[socket.socket, int]:
    """Bind a listening Unix socket whose file is 0600 from the start (no chmod race)."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        raw.setblocking(False)
        # Linux creates the socket file with the socket inode's mode (minus umask).
        with contextlib.suppress(OSError):
            os.fchmod(raw.fileno(), 0o600)
        raw.bind(path)
        os.chmod(path, 0o600)  # other platforms, and a permissive umask
        raw.listen(64)
        return raw, os.stat(path).st_ino
    except BaseException:
        raw.close()
        raise


def _unlink_if_ours(path: str, inode: int) -> None:
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == inode:
            os.unlink(path)


async def _handle_connection(
    controller: DrainController, stream: SocketStream, idle_timeout: float
) -> None:
    async with stream:
        reader = BufferedByteReceiveStream(stream)
        try:
            while True:
                with anyio.move_on_after(idle_timeout) as idle:
                    line = await reader.receive_until(b"\n", _MAX_LINE)
                if idle.cancelled_caught:
                    return
                reply = _execute(controller, line.decode("utf-8", "replace").strip())
                await stream.send(json_bytes(reply) + b"\n")
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            ConnectionError,
        ):
            return
        except anyio.DelimiterNotFound:
            with contextlib.suppress(anyio.BrokenResourceError, ConnectionError):
                await stream.send(json_bytes({"ok": False, "error": "line too long"}) + b"\n")
        except Exception:  # one bad connection must not take the server down
            logger.exception("control connection failed")


def _execute(controller: DrainController, command: str) -> dict[str, Any]:
    if command == "drain":
        started = controller.begin_drain()
        logger.info("control socket: drain (started=%s)", started)
        return {
            "ok": True,
            "command": "drain",
            "started": started,
            "status": controller.statistics().to_dict(),
        }
    if command == "status":
        return {"ok": True, "command": "status", "status": controller.statistics().to_dict()}
    return {"ok": False, "error": f"unknown command {command[:40]!r} (use drain or status)"}


# -- client -------------------------------------------------------------------------------
class _Connection:
    def __init__(self, path: str, stream: SocketStream) -> None:
        self._path = path
        self._stream = stream
        self._reader = BufferedByteReceiveStream(stream)

    async def request(self, command: str) -> dict[str, Any]:
        try:
            await self._stream.send(command.encode() + b"\n")
            line = await self._reader.receive_until(b"\n", _MAX_REPLY)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as exc:
            raise ControlSocketError(self._path, f"connection lost: {exc!r}") from exc
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ControlSocketError(self._path, f"bad reply {line[:80]!r}") from exc
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise ControlSocketError(self._path, f"command {command!r} failed: {reply!r}")
        return reply


@contextlib.asynccontextmanager
async def _connect(path: str | os.PathLike[str]) -> AsyncIterator[_Connection]:
    path = os.fspath(path)
    try:
        stream = await _connect_unix(path)
    except OSError as exc:
        raise ControlSocketError(path, f"cannot connect: {exc.strerror or exc}") from exc
    async with stream:
        yield _Connection(path, stream)


async def control_request(
    path: str | os.PathLike[str],
    command: str,
    *,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Send one command and return the decoded reply; raises :class:`ControlSocketError`."""
    try:
        with anyio.fail_after(timeout):
            async with _connect(path) as connection:
                return await connection.request(command)
    except TimeoutError:
        raise ControlSocketError(os.fspath(path), f"no reply within {timeout} s") from None


@attrs.frozen(kw_only=True)
class DrainReport:
    """What :func:`run_drain_command` saw."""

    socket_path: str
    #: True if this command began the drain (False: it was already draining).
    started_drain: bool
    #: In-flight reached zero before the timeout.
    drained: bool
    timed_out: bool
    #: Seconds actually spent in the propagation wait and in the whole command.
    propagation_waited: float
    elapsed: float
    initial: DrainStatistics
    final: DrainStatistics
    #: Set when the connection broke while waiting (e.g. the server exited).
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["initial"] = self.initial.to_dict()
        data["final"] = self.final.to_dict()
        return data


async def run_drain_command(
    socket_path: str | os.PathLike[str],
    propagation_wait: float,
    timeout: float | None,
    *,
    poll_interval: float = 0.1,
) -> DrainReport:
    """Tell the server to drain, wait ``propagation_wait`` s, then until in-flight is zero.

    ``timeout`` bounds the whole command, propagation wait included (like the grace period
    bounds a preStop hook). Raises :class:`ControlSocketError` if the drain cannot be requested.
    """
    path = os.fspath(socket_path)
    start = anyio.current_time()
    deadline = math.inf if timeout is None else start + timeout
    error: str | None = None
    async with _connect(path) as connection:
        reply = await connection.request("drain")
        initial = final = DrainStatistics.from_mapping(reply["status"])
        with anyio.CancelScope(deadline=deadline):
            await anyio.sleep(propagation_wait)
        waited = anyio.current_time() - start
        try:
            while True:  # at least one look after the propagation wait, even past the deadline
                with anyio.fail_after(_REQUEST_TIMEOUT):
                    final = DrainStatistics.from_mapping(
                        (await connection.request("status"))["status"]
                    )
                remaining = deadline - anyio.current_time()
                if final.drained or remaining <= 0:
                    break
                await anyio.sleep(min(poll_interval, remaining))
        except ControlSocketError as exc:
            error = exc.message
        except TimeoutError:
            error = f"no status reply within {_REQUEST_TIMEOUT} s"
    return DrainReport(
        socket_path=path,
        started_drain=bool(reply.get("started")),
        drained=final.drained and error is None,
        timed_out=not final.drained and error is None,
        propagation_waited=waited,
        elapsed=anyio.current_time() - start,
        initial=initial,
        final=final,
        error=error,
    )
