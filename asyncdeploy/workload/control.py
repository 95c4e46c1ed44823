"""Local control socket: a Unix socket (mode 0600, in a private directory) speaking one-line
commands.

Requests are lines: ``drain`` (begin the drain, idempotent), with optional arguments
``propagation=SECONDS`` (bound this drain's propagation window; it can shorten a window already
open, never extend it) and ``balancer-interval=SECONDS balancer-fall=N`` (the check of the
balancer in front: the window may close once it has certainly taken the server out);
``traffic-left`` (the deployer saw the server leave every ready endpoint set: the window may
close after kube-proxy's margin); or ``status``. Every reply is one JSON line:
``{"ok": true, "command": ..., "status": {...DrainStatistics...}}``; ``drain`` adds
``"started"`` (whether this command began the drain), errors are ``{"ok": false, "error": ...}``.
The client is :mod:`asyncdeploy.workload.client`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import socket
import stat
from typing import Any

import anyio
import attrs
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from ._asgi import json_bytes
from ._unix import (
    accept_nonblocking,
    bind_private,
    connect_unix,
    prepare_private_directory,
    unlink_if_ours,
)
from .errors import ControlSocketError, ControlSocketInUse
from .state import DrainController
from .window import BalancerCheck

__all__ = ["execute_command", "serve_control_socket"]

logger = logging.getLogger("asyncdeploy.workload")

_MAX_LINE = 1024


# -- server -------------------------------------------------------------------------------
async def serve_control_socket(
    controller: DrainController,
    path: str | os.PathLike[str],
    *,
    idle_timeout: float = 30.0,
    max_connections: int = 16,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control socket at ``path`` until cancelled; use with ``TaskGroup.start``.

    The parent directory is created (mode 0700) if missing; an existing one must belong to the
    current user and be writable by nobody else, or :class:`ControlSocketError` says why. A
    stale socket file left by a dead process is replaced, a live one raises
    :class:`ControlSocketInUse`. The socket file is created with mode 0600 and removed on exit.

    At most ``max_connections`` are open at once: a newcomer beyond that closes the oldest
    connection that has not sent a command yet, or, when every one has, is refused with an error
    line. A connection silent for ``idle_timeout`` seconds is closed. Running out of file
    descriptors pauses accepting (the backlog waits) instead of ending the server.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be >= 1")
    path = os.fspath(path)
    prepare_private_directory(path)
    await _remove_stale_socket(path)
    raw, inode = bind_private(path)
    slots = _ConnectionSlots(max_connections)
    try:
        with raw:
            logger.info("control socket listening on %s", path)
            task_status.started(path)
            async with anyio.create_task_group() as tg:
                while True:
                    client = await accept_nonblocking(raw)
                    peer = slots.admit()
                    if peer is None:
                        _refuse(client, max_connections)
                        continue
                    try:
                        stream = await SocketStream.from_socket(client)
                    except BaseException:
                        slots.leave(peer)
                        client.close()
                        raise
                    tg.start_soon(_handle_connection, controller, stream, peer, slots, idle_timeout)
    finally:
        unlink_if_ours(path, inode)


@attrs.define(eq=False)
class _Peer:
    """One open control connection; ``scope`` closes it."""

    scope: anyio.CancelScope = attrs.Factory(anyio.CancelScope)
    #: Sent a command: a client at work, never closed to make room for a newcomer.
    spoke: bool = False


class _ConnectionSlots:
    """The bound on open control connections (oldest first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._peers: list[_Peer] = []

    def admit(self) -> _Peer | None:
        """A slot for a new connection, freed from a silent one if need be; None when full."""
        if len(self._peers) >= self.limit:
            silent = next((peer for peer in self._peers if not peer.spoke), None)
            if silent is None:
                return None
            logger.debug("control socket: closing a silent connection to make room")
            self.leave(silent)
            silent.scope.cancel()
        peer = _Peer()
        self._peers.append(peer)
        return peer

    def leave(self, peer: _Peer) -> None:
        with contextlib.suppress(ValueError):
            self._peers.remove(peer)


def _refuse(client: socket.socket, limit: int) -> None:
    logger.warning("control socket: refused a connection, %d busy connections open", limit)
    error = {"ok": False, "error": f"busy: {limit} control connections are in use, try again"}
    with client, contextlib.suppress(OSError):
        client.send(json_bytes(error) + b"\n")  # a fresh socket's buffer takes it at once


async def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ControlSocketError(path, "exists and is not a socket")
    try:
        with anyio.fail_after(1):
            stream = await connect_unix(path)
    except TimeoutError:  # before OSError, its base class
        raise ControlSocketError(path, "an existing socket does not answer") from None
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ControlSocketError(path, f"cannot probe the existing socket: {exc}") from exc
        os.unlink(path)  # nobody listens: a leftover of a dead process
    else:
        await stream.aclose()
        raise ControlSocketInUse(path, "another server is listening")


async def _handle_connection(
    controller: DrainController,
    stream: SocketStream,
    peer: _Peer,
    slots: _ConnectionSlots,
    idle_timeout: float,
) -> None:
    try:
        with peer.scope:
            async with stream:
                await _converse(controller, stream, peer, idle_timeout)
    finally:
        slots.leave(peer)


async def _converse(
    controller: DrainController, stream: SocketStream, peer: _Peer, idle_timeout: float
) -> None:
    reader = BufferedByteReceiveStream(stream)
    try:
        while True:
            with anyio.move_on_after(idle_timeout) as idle:
                line = await reader.receive_until(b"\n", _MAX_LINE)
            if idle.cancelled_caught:
                return
            peer.spoke = True
            reply = _execute(controller, line.decode("utf-8", "replace").strip())
            with anyio.move_on_after(idle_timeout) as stuck:  # a client that never reads
                await stream.send(json_bytes(reply) + b"\n")
            if stuck.cancelled_caught:
                return
    except (
        anyio.EndOfStream,
        anyio.IncompleteRead,
        anyio.BrokenResourceError,
        ConnectionError,
    ):
        return
    except anyio.DelimiterNotFound:
        with anyio.move_on_after(1), contextlib.suppress(anyio.BrokenResourceError, OSError):
            await stream.send(json_bytes({"ok": False, "error": "line too long"}) + b"\n")
    except Exception:  # one bad connection must not take the server down
        logger.exception("control connection failed")


def _drain_arguments(words: list[str]) -> tuple[float | None, BalancerCheck | None]:
    """``drain``'s ``propagation=SECONDS`` and ``balancer-interval=SECONDS balancer-fall=N``
    (None for what is not given; a fall without an interval is an error)."""
    given: dict[str, str] = {}
    for word in words:
        key, _, value = word.partition("=")
        if key not in ("propagation", "balancer-interval", "balancer-fall"):
            raise ValueError(
                f"unknown argument {word[:40]!r} (use propagation=SECONDS, "
                "balancer-interval=SECONDS, balancer-fall=N)"
            )
        given[key] = value
    propagation = None
    if "propagation" in given:
        propagation = float(given["propagation"])
        if not 0 <= propagation < math.inf:
            raise ValueError("propagation must be a finite number of seconds >= 0")
    check = None
    if "balancer-interval" in given:
        fall = given.get("balancer-fall", "3")
        if not fall.isdigit():
            raise ValueError(f"balancer-fall must be a whole number, not {fall[:20]!r}")
        check = BalancerCheck(interval=float(given["balancer-interval"]), fall=int(fall))
    elif "balancer-fall" in given:
        raise ValueError("balancer-fall needs balancer-interval")
    return propagation, check


def execute_command(controller: DrainController, command: str) -> dict[str, Any]:
    """Carry out one command line of this socket's protocol and return its JSON reply, for
    other transports: the drain gate's admin port speaks the same commands."""
    return _execute(controller, command)


def _execute(controller: DrainController, command: str) -> dict[str, Any]:
    verb, *words = command.split() or [""]
    if verb == "drain":
        try:
            propagation, check = _drain_arguments(words)
        except ValueError as exc:
            return {"ok": False, "error": f"drain: {exc}"}
        started = controller.begin_drain(propagation=propagation, balancer=check)
        logger.info(
            "control socket: drain (started=%s, propagation=%s, balancer=%s)",
            started,
            propagation,
            check,
        )
        return {
            "ok": True,
            "command": "drain",
            "started": started,
            "status": controller.statistics().to_dict(),
        }
    if command == "status":
        return {"ok": True, "command": "status", "status": controller.statistics().to_dict()}
    if command == "traffic-left":
        controller.note_traffic_left()
        return {
            "ok": True,
            "command": "traffic-left",
            "status": controller.statistics().to_dict(),
        }
    return {
        "ok": False,
        "error": f"unknown command {command[:40]!r} (use drain, traffic-left or status)",
    }
