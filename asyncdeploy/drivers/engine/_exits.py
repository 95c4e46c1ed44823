"""Container exits as the engine announces them: one ``/events`` stream per drain.

Podman answers a ``wait`` only once its per-container cleanup is over (about 1.6 s after the
process died, here), and every pending ``wait`` holds one of its few API workers (3 x CPUs + 1).
Its ``die`` event leaves at once. So a drain opens one event stream filtered to asyncdeploy's
containers and learns each exit, with its code, as soon as the engine knows it; per-container
``wait`` calls remain only the fallback for a stream that was cut. The stream opens beside the
drain's first hooks and signals (a slow ``/events`` must not eat a short grace): the drain looks
once at a container it signalled before the opening.

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

from asyncdeploy.labels import LABEL_WORKLOAD

if TYPE_CHECKING:  # the watch itself is engine-free: the drain and its fake use it without one
    from asyncdeploy.drivers.engine._session import EngineSession

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
    """What the stream has reported so far, and a way to wait for one container's exit.

    Every death is numbered in the order the stream reports it: a drain takes a :meth:`mark`
    before it signals a container and waits for a death *after* it. A container that died
    earlier (it crashed during its hook) and was restarted under its restart policy is still
    running: its old ``die`` record must not end the wait for its new life.
    """

    _deaths: dict[str, list[tuple[int, int | None]]] = attrs.field(factory=dict)
    _count: int = 0
    _waiters: dict[str, anyio.Event] = attrs.field(factory=dict)
    _lost: anyio.Event = attrs.field(factory=anyio.Event)
    _opened: anyio.Event = attrs.field(factory=anyio.Event)

    def record(self, ident: str, code: int | None) -> None:
        self._count += 1
        self._deaths.setdefault(ident, []).append((self._count, code))
        waiter = self._waiters.pop(ident, None)
        if waiter is not None:
            waiter.set()

    def open(self) -> None:
        """The stream is open: every exit from now on reaches it."""
        self._opened.set()

    def lose(self) -> None:
        self._lost.set()
        self._opened.set()  # settled: waiting for the opening would wait for ever
        for waiter in self._waiters.values():
            waiter.set()
        self._waiters.clear()

    @property
    def opened(self) -> bool:
        """True once the stream is open or known lost (see :meth:`settled`)."""
        return self._opened.is_set()

    async def settled(self) -> None:
        """Wait until the stream is open or known lost."""
        await self._opened.wait()

    def mark(self) -> int:
        """The number of the last death reported: :meth:`wait_exit` with ``since`` this
        number waits for a death after this moment."""
        return self._count

    def _after(self, ident: str, since: int) -> tuple[int, int | None] | None:
        return next((d for d in self._deaths.get(ident, ()) if d[0] > since), None)

    def reported(self, ident: str, since: int = 0) -> bool:
        """True when the stream has reported a death of this container after ``since``."""
        return self._after(ident, since) is not None

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    async def wait_exit(self, ident: str, since: int = 0) -> int | None:
        """The exit code of the first death of container ``ident`` after mark ``since`` (None
        when the engine gave none); raises :class:`ExitStreamLost` when the stream is gone
        before it reported one."""
        while True:
            if (death := self._after(ident, since)) is not None:
                return death[1]
            if self.lost:
                raise ExitStreamLost(ident)
            await self._waiters.setdefault(ident, anyio.Event()).wait()


async def first_exit(
    watch: ExitWatch,
    ident: str,
    engine_wait: Callable[[], Awaitable[int | None]],
    since: int = 0,
) -> int | None:
    """The exit code of a container dying now (just sent SIGKILL): the first answer of the
    stream and of ``engine_wait``. Podman's stream comes from an events file it reads every
    250 ms, so its polled state can be quicker. ``engine_wait``'s error is raised only when the
    stream cannot answer either (lost)."""
    if watch.reported(ident, since):
        return await watch.wait_exit(ident, since)
    codes: list[int | None] = []
    failures: list[Exception] = []

    async def from_stream(scope: anyio.CancelScope) -> None:
        try:
            codes.append(await watch.wait_exit(ident, since))
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


async def _follow(session: EngineSession, watch: ExitWatch) -> None:
    # Podman 4.3's compatible stream delivers nothing under an ``event`` or ``label`` filter:
    # take every container event and keep the die events of asyncdeploy's containers here.
    filters = {"type": ["container"]}
    response = None
    try:
        with anyio.fail_after(OPEN_TIMEOUT):
            # aiodocker's ``_query`` leaves the response to its caller: closed below.
            async with session.query(
                "events", method="GET", params={"filters": json.dumps(filters)}, timeout=None
            ) as response:
                pass
        watch.open()  # headers received: every later exit reaches this stream
        async for line in response.content:
            if not line.strip():
                continue
            try:
                found = die_event_exit(json.loads(line))
            except ValueError:
                continue
            if found is not None:
                watch.record(*found)
    except Exception:  # noqa: BLE001 - never opened, or cut: the waiters fall back to waits
        watch.lose()
    finally:
        watch.lose()
        if response is not None:
            response.close()  # an endless stream: never read to its end, never released


@asynccontextmanager
async def watch_exits(url: str, api_version: str = "auto") -> AsyncIterator[ExitWatch]:
    """Open the exit stream of asyncdeploy's containers on the engine at ``url``; yields at
    once, while the stream opens (:meth:`ExitWatch.settled`): the drain's first signals need
    not wait for it. Its own client, so it never takes a connection from the driver's pool.
    Pass the ``api_version`` the driver already knows: asking for it again (``auto``) costs
    0.3 s on Podman, whose ``/version`` is slow, before every drain."""
    from asyncdeploy.drivers.engine._session import EngineSession

    watch = ExitWatch()
    session = EngineSession.open(url, engine="", client_api_version=api_version)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, session, watch)
            try:
                yield watch
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await session.aclose()
