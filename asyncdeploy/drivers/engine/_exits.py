"""Container exits as the engine announces them: one ``/events`` stream per drain.

Podman answers a ``wait`` only once its per-container cleanup is over (about 1.6 s after the
process died, here), and every pending ``wait`` holds one of its few API workers (3 x CPUs + 1).
Its ``die`` event leaves at once. So a drain opens one event stream filtered to asyncdeploy's
containers *before* its first signal, and learns each exit, with its code, as soon as the engine
knows it; per-container ``wait`` calls remain only the fallback for a stream that was cut.

The stream is read on its own connection by a task of the caller's task group: no
fire-and-forget task, and closing the watch (or cancelling the caller) ends it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs
from anyio.abc import TaskStatus

from asyncdeploy.labels import LABEL_WORKLOAD

if TYPE_CHECKING:  # the watch itself is engine-free: the drain and its fake use it without one
    import aiodocker

__all__ = ["ExitStreamLost", "ExitWatch", "die_event_exit", "first_exit", "watch_exits"]

# A stream that does not open this fast is treated as absent: the drain falls back to waits
# rather than delay its first signal.
OPEN_TIMEOUT = 5.0


class ExitStreamLost(Exception):
    """The event stream ended or never opened: ask the engine with ``wait`` instead."""


def die_event_exit(raw: dict[str, Any]) -> tuple[str, int | None] | None:
    """``(container id, exit code)`` of the ``die`` event of one of asyncdeploy's containers
    (Docker reports ``exitCode``, Podman ``containerExitCode``); None for any other event."""
    if (raw.get("Action") or raw.get("status")) != "die":
        return None
    actor = raw.get("Actor") or {}
    ident = str(raw.get("id") or actor.get("ID") or "")
    attributes = actor.get("Attributes") or {}
    if not ident or LABEL_WORKLOAD not in attributes:  # labels travel as attributes
        return None
    code = attributes.get("exitCode", attributes.get("containerExitCode"))
    try:
        return ident, None if code in (None, "") else int(code)
    except (TypeError, ValueError):
        return ident, None


@attrs.define
class ExitWatch:
    """What the stream has reported so far, and a way to wait for one container's exit."""

    _codes: dict[str, int | None] = attrs.field(factory=dict)
    _waiters: dict[str, anyio.Event] = attrs.field(factory=dict)
    _lost: anyio.Event = attrs.field(factory=anyio.Event)

    def record(self, ident: str, code: int | None) -> None:
        self._codes[ident] = code
        waiter = self._waiters.pop(ident, None)
        if waiter is not None:
            waiter.set()

    def lose(self) -> None:
        self._lost.set()
        for waiter in self._waiters.values():
            waiter.set()
        self._waiters.clear()

    def reported(self, ident: str) -> bool:
        """True when the stream has reported this container's exit."""
        return ident in self._codes

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    async def wait_exit(self, ident: str) -> int | None:
        """The exit code of container ``ident`` (None when the engine gave none); raises
        :class:`ExitStreamLost` when the stream is gone before it reported this exit."""
        if ident in self._codes:
            return self._codes[ident]
        if self.lost:
            raise ExitStreamLost(ident)
        waiter = self._waiters.setdefault(ident, anyio.Event())
        await waiter.wait()
        if ident in self._codes:
            return self._codes[ident]
        raise ExitStreamLost(ident)


async def first_exit(
    watch: ExitWatch, ident: str, engine_wait: Callable[[], Awaitable[int | None]]
) -> int | None:
    """The exit code of a container dying now (just sent SIGKILL): the first answer of the
    stream and of ``engine_wait``. Podman's stream comes from an events file it reads every
    250 ms, so its polled state can be quicker. ``engine_wait``'s error is raised only when the
    stream cannot answer either (lost)."""
    if watch.reported(ident):
        return await watch.wait_exit(ident)
    codes: list[int | None] = []
    failures: list[Exception] = []

    async def from_stream(scope: anyio.CancelScope) -> None:
        try:
            codes.append(await watch.wait_exit(ident))
        except ExitStreamLost:
            return  # the engine's answer decides
        scope.cancel()

    async def from_engine(scope: anyio.CancelScope) -> None:
        try:
            codes.append(await engine_wait())
        except Exception as exc:  # noqa: BLE001 - gone, say: the stream may still report it
            failures.append(exc)
            return
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(from_stream, tg.cancel_scope)
        tg.start_soon(from_engine, tg.cancel_scope)
    if codes:
        return codes[0]
    raise failures[0]


async def _follow(
    client: aiodocker.Docker, watch: ExitWatch, *, task_status: TaskStatus[None]
) -> None:
    # Podman 4.3's compatible stream delivers nothing under an ``event`` or ``label`` filter:
    # take every container event and keep the die events of asyncdeploy's containers here.
    filters = {"type": ["container"]}
    try:
        with anyio.fail_after(OPEN_TIMEOUT):
            response_cm = client._query(
                "events", method="GET", params={"filters": json.dumps(filters)}, timeout=None
            )
            response = await response_cm.__aenter__()
    except Exception:  # noqa: BLE001 - any failure to open: the drain waits per container
        watch.lose()
        task_status.started()
        return
    try:
        task_status.started()  # headers received: every later exit reaches this stream
        async for line in response.content:
            if not line.strip():
                continue
            try:
                found = die_event_exit(json.loads(line))
            except ValueError:
                continue
            if found is not None:
                watch.record(*found)
    except Exception:  # noqa: BLE001 - a cut stream: the waiters fall back to wait calls
        watch.lose()
    finally:
        watch.lose()
        with anyio.CancelScope(shield=True):
            await response_cm.__aexit__(None, None, None)


@asynccontextmanager
async def watch_exits(url: str, api_version: str = "auto") -> AsyncIterator[ExitWatch]:
    """Open the exit stream of asyncdeploy's containers on the engine at ``url``; yields once
    the stream is open (or known lost). Its own client, so it never takes a connection from the
    driver's pool. Pass the ``api_version`` the driver already knows: asking for it again
    (``auto``) costs 0.3 s on Podman, whose ``/version`` is slow, before every drain."""
    import aiodocker

    watch = ExitWatch()
    client = aiodocker.Docker(url=url, api_version=api_version)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(_follow, client, watch)
            try:
                yield watch
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()
