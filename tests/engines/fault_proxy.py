"""A unix-socket proxy in front of the engine's socket that a test can cut and take down.

``cut()`` drops every open connection (an in-flight ``wait`` loses its answer) and the proxy
keeps accepting; ``down()`` also makes it hang up on every new connection at once, until
``heal()``. That is how a restarting engine socket or a flaky network hop looks to a client.
``freeze()`` is an engine that deadlocked: it keeps accepting, and nothing more is forwarded
either way, on old connections or new ones, until ``release()``. ``slow(method, path_part)``
is an engine slow to answer one kind of call (a loaded one's removals, queued behind one
another; a claim): each such request waits until ``release()``, the others go on as before.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from anyio.abc import ByteStream, TaskStatus

# asyncdeploy's own Unix streams: anyio's raise InvalidStateError into the loop when a cut
# cancels a read as data arrives (the reason is beside these functions)
from asyncdeploy.workload._unix import accept_stream, bind_private, connect_unix


class EngineProxy:
    def __init__(self, listen: Path, upstream: str) -> None:
        self.listen = listen
        self.upstream = upstream
        self.url = f"unix://{listen}"
        self.cuts = 0
        self.accepted = 0  # connections accepted so far
        self._open: set[anyio.CancelScope] = set()
        self._down = False
        self._released = anyio.Event()
        self._released.set()
        self._flowing = anyio.Event()
        self._flowing.set()
        self._slow: bytes | None = None  # the request line's start of the calls held
        self._slow_path = b""  # and what their path has in it
        self.held = anyio.Event()  # set once a slow call was held

    def cut(self) -> None:
        """Drop every connection open now; new ones are served as before."""
        self.cuts += 1
        for scope in self._open:
            scope.cancel()

    def down(self) -> None:
        """Drop every connection and hang up on new ones until :meth:`heal`."""
        self._down = True
        self.cut()

    def heal(self) -> None:
        self._down = False

    def hold(self) -> None:
        """Accept new connections but forward nothing until :meth:`release` (a frozen engine)."""
        self._released = anyio.Event()

    def release(self) -> None:
        self._released.set()
        self._flowing.set()
        self._slow = None

    def slow(self, method: str, path_part: str = "") -> None:
        """Hold each request of ``method`` (HTTP/1.1 without pipelining: a request starts a
        chunk), of those whose path has ``path_part`` in it, until :meth:`release`."""
        self._slow = f"{method} ".encode()
        self._slow_path = path_part.encode()
        self._flowing = anyio.Event()  # what is held waits on it; the rest goes by

    def _held(self, chunk: bytes) -> bool:
        if self._slow is None:
            return True  # frozen: everything waits
        line = chunk.split(b"\r\n", 1)[0]
        return line.startswith(self._slow) and self._slow_path in line

    def freeze(self) -> None:
        """Accept, and forward nothing more on any connection, until :meth:`release`."""
        self.hold()
        self._flowing = anyio.Event()

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        async def pump(source: ByteStream, sink: ByteStream, pair: anyio.CancelScope) -> None:
            try:
                async for chunk in source:
                    if self._held(chunk):
                        if self._slow is not None:
                            self.held.set()
                        await self._flowing.wait()
                    await sink.send(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            pair.cancel()

        async def handle(client: ByteStream) -> None:
            async with client:
                self.accepted += 1
                if self._down:
                    return  # hang up at once
                await self._released.wait()
                with anyio.CancelScope() as scope:
                    self._open.add(scope)
                    try:
                        async with (
                            await connect_unix(self.upstream) as server,
                            anyio.create_task_group() as pair,
                        ):
                            pair.start_soon(pump, client, server, pair.cancel_scope)
                            pair.start_soon(pump, server, client, pair.cancel_scope)
                    finally:
                        self._open.discard(scope)

        listening, _ = bind_private(str(self.listen))
        with listening:
            task_status.started()
            async with anyio.create_task_group() as connections:
                while True:
                    connections.start_soon(handle, await accept_stream(listening))
