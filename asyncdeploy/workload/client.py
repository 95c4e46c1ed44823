"""The control socket's client: one command (:func:`control_request`) or the whole preStop
drain (:func:`run_drain_command`, what ``asyncdeploy drain`` and ``python3 -m
asyncdeploy.workload.drain_cmd`` run).

Every step is bounded: connecting and each reply by the command's timeout (or by
``_REQUEST_TIMEOUT`` without one), so a socket that accepts and never answers ends the command
with a :class:`ControlSocketError` instead of hanging the hook. Before connecting, the socket must
sit in a directory nobody else can write and belong to the current user (see ``_unix``), so a
socket swapped in by someone else cannot answer ``drained: true``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import attrs
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from ._unix import check_trusted_socket, connect_unix
from .errors import ControlSocketError
from .state import DrainStatistics

__all__ = ["DrainReport", "control_request", "run_drain_command"]

_MAX_REPLY = 64 * 1024
#: Bound of one request when the command has no timeout of its own.
_REQUEST_TIMEOUT = 5.0
#: The propagation wait ends this much before the timeout, to leave room for a status look.
_LAST_LOOK = 0.2


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
async def _connect(path: str) -> AsyncIterator[_Connection]:
    check_trusted_socket(path)
    try:
        stream = await connect_unix(path)
    except OSError as exc:
        raise ControlSocketError(path, f"cannot connect: {exc.strerror or exc}") from exc
    async with stream:
        yield _Connection(path, stream)


@contextlib.contextmanager
def _reply_by(path: str, what: str, deadline: float) -> Iterator[None]:
    """Bound a block by ``deadline``, and by ``_REQUEST_TIMEOUT`` from now."""
    budget = min(deadline - anyio.current_time(), _REQUEST_TIMEOUT)
    try:
        with anyio.fail_after(max(budget, 0.0)):
            yield
    except TimeoutError:
        raise ControlSocketError(path, f"no answer to {what} within {budget:.3g} s") from None


async def control_request(
    path: str | os.PathLike[str],
    command: str,
    *,
    timeout: float = _REQUEST_TIMEOUT,
) -> dict[str, Any]:
    """Send one command and return the decoded reply; raises :class:`ControlSocketError`.

    ``timeout`` bounds connecting and the reply together.
    """
    path = os.fspath(path)
    try:
        with anyio.fail_after(timeout):
            async with _connect(path) as connection:
                return await connection.request(command)
    except TimeoutError:
        raise ControlSocketError(path, f"no answer to {command!r} within {timeout:g} s") from None


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

    ``timeout`` bounds the whole command, connecting and the propagation wait included (like the
    grace period bounds a preStop hook); the propagation wait ends early enough to leave one
    look at the status inside it. Raises :class:`ControlSocketError` if the drain cannot be
    requested (no socket, an untrusted one, no answer in time).
    """
    path = os.fspath(socket_path)
    start = anyio.current_time()
    deadline = math.inf if timeout is None else start + timeout
    error: str | None = None
    async with contextlib.AsyncExitStack() as stack:
        with _reply_by(path, "drain", deadline):
            connection = await stack.enter_async_context(_connect(path))
            reply = await connection.request("drain")
        initial = final = DrainStatistics.from_mapping(reply["status"])
        propagated = min(start + propagation_wait, max(deadline - _LAST_LOOK, start))
        await anyio.sleep_until(propagated)
        waited = anyio.current_time() - start
        try:
            while not final.drained and anyio.current_time() < deadline:
                with _reply_by(path, "status", deadline):
                    final = DrainStatistics.from_mapping(
                        (await connection.request("status"))["status"]
                    )
                remaining = deadline - anyio.current_time()
                if not final.drained and remaining > 0:
                    await anyio.sleep(min(poll_interval, remaining))
        except ControlSocketError as exc:
            if anyio.current_time() < deadline:  # not just the timeout running out
                error = exc.message
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
