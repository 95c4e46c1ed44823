"""Unix-socket plumbing: trusted directories, bind, accept, connect (the control socket's, and
the one home of every Unix-socket stream asyncdeploy opens: the gate's and verify's too).

The rule both ends apply (one implementation, :func:`check_private_directory`): the socket's
directory belongs to the current user (or root) and nobody else may write to it, so nobody else
can remove the socket and put their own in its place. The server creates a missing directory
0700; the client also wants the socket itself owned by the current user.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat

import anyio
from anyio.abc import SocketStream

from asyncdeploy._backoff import ACCEPT

from .errors import ControlSocketError

__all__ = [
    "accept_nonblocking",
    "accept_stream",
    "bind_private",
    "check_private_directory",
    "check_trusted_socket",
    "connect_unix",
    "prepare_private_directory",
    "remove_socket_file",
    "unlink_if_ours",
]

logger = logging.getLogger("asyncdeploy.workload")

# Out of file descriptors: wait for connections to close instead of failing the server.
_FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_private_directory(socket_path: str) -> None:
    """Raise :class:`ControlSocketError` unless only we (or root) can write the socket's directory."""
    directory = os.path.dirname(socket_path) or "."
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise ControlSocketError(
            socket_path, f"cannot inspect {directory}: {exc.strerror}"
        ) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise ControlSocketError(socket_path, f"{directory} is not a directory")
    if not _trusted_owner(info.st_uid):
        raise ControlSocketError(
            socket_path,
            f"directory {directory} belongs to uid {info.st_uid}, not to uid {os.geteuid()}: "
            "its owner could replace the socket",
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ControlSocketError(
            socket_path,
            f"directory {directory} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}):"
            " anyone could replace the socket; use a directory only its owner can write (0700)",
        )


def prepare_private_directory(socket_path: str) -> None:
    """Create the socket's directory 0700 if missing, then check it (see the module docstring)."""
    directory = os.path.dirname(socket_path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ControlSocketError(socket_path, f"cannot create {directory}: {exc.strerror}") from exc
    check_private_directory(socket_path)


def check_trusted_socket(socket_path: str) -> None:
    """The client's check: a private directory, and a socket that the current user owns."""
    if not os.path.lexists(os.path.dirname(socket_path) or "."):
        return  # connecting says "no such file", with the path
    check_private_directory(socket_path)
    try:
        info = os.stat(socket_path)
    except FileNotFoundError:
        return  # connecting says "no such file", with the path
    except OSError as exc:
        raise ControlSocketError(socket_path, f"cannot inspect: {exc.strerror}") from exc
    if not stat.S_ISSOCK(info.st_mode):
        raise ControlSocketError(socket_path, "is not a socket")
    if info.st_uid != os.geteuid():
        raise ControlSocketError(
            socket_path,
            f"the socket belongs to uid {info.st_uid}, not to uid {os.geteuid()}: "
            "it is not our server's",
        )


def bind_private(path: str) -> tuple[socket.socket, int]:
    """Bind a listening Unix socket whose file is 0600 from the start (no chmod race)."""
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


def unlink_if_ours(path: str, inode: int) -> None:
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == inode:
            os.unlink(path)


def remove_socket_file(path: str) -> None:
    """Remove a socket file left at ``path`` (by a process that is gone); anything else stays."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


# Every Unix-socket stream of asyncdeploy (the kit's, the gate's, verify's) is made here, never
# by anyio.connect_unix or anyio.create_unix_listener: anyio's own Unix streams wait on the raw
# socket with a reader callback that sets a future, so a read cancelled in the loop iteration
# where data arrives raises InvalidStateError from that callback, into the application's loop
# exception handler (agronholm/anyio#1267 fixed the close path, not this one). Raw sockets are
# accepted or connected here and wrapped as transport-based SocketStreams instead.
async def accept_nonblocking(listening: socket.socket) -> socket.socket:
    """Accept one connection; on an error, back off and retry.

    Running out of file descriptors is expected under load; any other error is logged as
    unexpected, but never ends the control socket's server either (and with it the server
    it runs beside): the pending connections wait in the listen backlog meanwhile.
    """
    pauses = ACCEPT.pauses()
    while True:
        await anyio.wait_readable(listening)
        try:
            client, _ = listening.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            continue
        except OSError as exc:
            backoff = next(pauses)
            if exc.errno in _FD_EXHAUSTED:
                logger.warning(
                    "control socket: cannot accept (%s); retrying in %.2f s", exc.strerror, backoff
                )
            else:
                logger.error(
                    "control socket: unexpected accept error %r; retrying in %.2f s", exc, backoff
                )
            await anyio.sleep(backoff)
            continue
        client.setblocking(False)
        return client


async def accept_stream(listening: socket.socket) -> SocketStream:
    """The next connection (see :func:`accept_nonblocking`), as a transport-based stream."""
    client = await accept_nonblocking(listening)
    try:
        return await SocketStream.from_socket(client)
    except BaseException:
        client.close()
        raise


async def connect_unix(path: str) -> SocketStream:
    """Connect; a full listen backlog is retried until the caller's cancel scope ends it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        while True:
            try:
                sock.connect(path)  # local: completes at once, or EAGAIN if the backlog is full
                break
            except BlockingIOError:
                await anyio.sleep(0.02)
        return await SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise
