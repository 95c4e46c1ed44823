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
from .window import BalancerCheck

__all__ = ["DrainReport", "control_request", "drain_request", "run_drain_command"]

_MAX_REPLY = 64 * 1024
#: Bound of one request when the command has no timeout of its own.
_REQUEST_TIMEOUT = 5.0


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
    #: In-flight reached zero (after the propagation window closed) before the timeout.
    drained: bool
    timed_out: bool
    #: Seconds from the command's start until the server's propagation window was seen closed
    #: (or until the command ended, if it never was), and for the whole command.
    propagation_waited: float
    elapsed: float
    initial: DrainStatistics
    final: DrainStatistics
    #: Set when the connection broke while waiting (e.g. the server exited).
    error: str | None = None

    @property
    def propagation_observed(self) -> float | None:
        """Seconds from the drain start until the last new request reached the server."""
        return self.final.propagation_observed

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["initial"] = self.initial.to_dict()
        data["final"] = self.final.to_dict()
        # the propagation as the server saw it, next to the wait (the rest is in "final")
        data["propagation_observed"] = self.final.propagation_observed
        data["window_closed_after"] = self.final.window_closed_after
        data["window_close_reason"] = self.final.window_close_reason
        return data


def drain_request(propagation_wait: float | None, balancer: BalancerCheck | None) -> str:
    """The control socket's ``drain`` line for these arguments."""
    words = ["drain"]
    if propagation_wait is not None:
        words.append(f"propagation={propagation_wait!r}")
    if balancer is not None:
        words += [f"balancer-interval={balancer.interval!r}", f"balancer-fall={balancer.fall}"]
    return " ".join(words)


async def run_drain_command(
    socket_path: str | os.PathLike[str],
    propagation_wait: float | None,
    timeout: float | None,
    *,
    balancer: BalancerCheck | None = None,
    poll_interval: float = 0.1,
) -> DrainReport:
    """Tell the server to drain, then wait until its propagation window closed and in-flight
    is zero; return what was seen.

    ``propagation_wait`` bounds the server's propagation window for this drain (None: the
    server's own setting): the server keeps serving new requests until every balancer has
    certainly stopped sending (``balancer``: the check of the balancer in front, see
    :class:`BalancerCheck`), at most that long, then refuses them. ``timeout`` bounds the whole command, connecting
    included (like the grace period bounds a preStop hook). The status is polled every
    ``poll_interval`` s on one connection, so no wait is ever silent for long. Raises
    :class:`ControlSocketError` if the drain cannot be requested (no socket, an untrusted one,
    no answer in time).
    """
    path = os.fspath(socket_path)
    start = anyio.current_time()
    deadline = math.inf if timeout is None else start + timeout
    error: str | None = None
    waited: float | None = None
    command = drain_request(propagation_wait, balancer)
    async with contextlib.AsyncExitStack() as stack:
        with _reply_by(path, "drain", deadline):
            connection = await stack.enter_async_context(_connect(path))
            reply = await connection.request(command)
        initial = final = DrainStatistics.from_mapping(reply["status"])
        try:
            while True:
                if waited is None and not final.accepting:
                    waited = anyio.current_time() - start
                if final.drained:
                    break
                remaining = deadline - anyio.current_time()
                if remaining <= 0:
                    break
                await anyio.sleep(min(poll_interval, remaining))
                if anyio.current_time() >= deadline:
                    break
                with _reply_by(path, "status", deadline):
                    final = DrainStatistics.from_mapping(
                        (await connection.request("status"))["status"]
                    )
        except ControlSocketError as exc:
            if anyio.current_time() < deadline:  # not just the timeout running out
                error = exc.message
    elapsed = anyio.current_time() - start
    return DrainReport(
        socket_path=path,
        started_drain=bool(reply.get("started")),
        drained=final.drained and error is None,
        timed_out=not final.drained and error is None,
        propagation_waited=elapsed if waited is None else waited,
        elapsed=elapsed,
        initial=initial,
        final=final,
        error=error,
    )
