"""The controller's own answers, served to HAProxy on unix sockets: health, metrics, admin.

HAProxy parses and bounds what clients send (its head timeout, its head size, its framing);
what reaches these sockets is one well-formed HTTP/1.1 request a connection, from HAProxy
itself. So this reads a head, answers, and closes: no keep-alive, no pipelining, no framing
of its own beyond skipping a request body it does not need. One answer is a stream held open
(:class:`Held`: a gRPC health Watch), until HAProxy closes it or the gate stops.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import attrs
from anyio.abc import SocketStream, TaskStatus

from asyncdeploy.workload._unix import (
    accept_stream,
    bind_private,
    remove_socket_file,
    unlink_if_ours,
)

from ._reader import Reader

__all__ = ["Held", "LocalAnswer", "LocalHandler", "Request", "parse_request", "serve_local"]

logger = logging.getLogger("asyncdeploy.gate")

#: How long a body the answer does not need is read (and dropped) before the connection closes.
DISCARD_SECONDS = 1.0


@attrs.define(slots=True)
class Request:
    """A request as HAProxy sent it on."""

    method: bytes
    path: bytes
    query: bytes
    headers: list[tuple[bytes, bytes]]
    #: Kept for the answers' signature; the controller's own answers always close (HAProxy
    #: keeps the client's connection, on its side).
    keep_alive: bool = False


@attrs.frozen
class Held:
    """An answer's start, the stream then held open until HAProxy closes it (its client gone,
    its timeout) or the gate stops."""

    start: bytes


LocalAnswer = bytes | Held | Callable[[], Awaitable[bytes]]
"""What the controller answers: the bytes now, a held stream's start, or a coroutine function
that makes the bytes."""

LocalHandler = Callable[[Request], LocalAnswer]


def parse_request(head: bytes) -> Request:
    """A head HAProxy sent (already validated by it): its start line and header fields."""
    lines = head.split(b"\r\n")
    method, target, _ = lines[0].split(b" ", 2)
    path, _, query = target.partition(b"?")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        headers.append((name.strip(), value.strip()))
    return Request(method=method, path=path, query=query, headers=headers)


async def _serve_one(stream: SocketStream, handler: LocalHandler) -> None:
    async with stream:
        reader = Reader(stream)
        try:
            head = await reader.head()
            if head is None:
                return
            request = parse_request(head)
        except (ValueError, anyio.BrokenResourceError, OSError):
            return
        answer = handler(request)
        try:
            if isinstance(answer, Held):
                await stream.send(answer.start)
                while await reader.some():  # (the request's body, then nothing until closed)
                    pass
                return
            data = answer if isinstance(answer, bytes) else await answer()
            await stream.send(data)
            await stream.send_eof()
            # read what is left (a body) until HAProxy closes: closing with unread bytes
            # would reset the connection before HAProxy read the answer
            with anyio.move_on_after(DISCARD_SECONDS):
                while await reader.some():
                    pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        except RuntimeError:  # uvloop's write_eof on a transport HAProxy closed meanwhile
            pass


async def _serve_guarded(stream: SocketStream, handler: LocalHandler) -> None:
    """One connection; whatever it raises ends it alone, never the gate (logged: a defect)."""
    try:
        await _serve_one(stream, handler)
    except Exception:
        logger.exception("a local answer failed")


async def serve_local(
    path: Path, handler: LocalHandler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``handler`` on the unix socket ``path`` (mode 0600) until cancelled."""
    remove_socket_file(str(path))  # a gate that was killed left it
    listening, inode = bind_private(str(path))
    try:
        with listening:
            task_status.started()
            async with anyio.create_task_group() as tg:
                while True:
                    tg.start_soon(_serve_guarded, await accept_stream(listening), handler)
    finally:
        unlink_if_ours(str(path), inode)
