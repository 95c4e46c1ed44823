"""Container exits (and removals) as the engine announces them: one ``/events`` stream per
deployer, shared by every drain it runs.

Podman answers a ``wait`` only once its per-container cleanup is over (about 1.6 s after the
process died, here), and every pending ``wait`` holds one of its few API workers (3 x CPUs + 1).
Its ``die`` event leaves at once. So the drains read one event stream filtered to asyncdeploy's
containers and learn each exit, with its code, as soon as the engine knows it; per-container
``wait`` calls remain only the fallback for a stream that was cut. The stream opens beside the
drains' first hooks and signals (a slow ``/events`` must not eat a short grace): a drain looks
once at a container it signalled before the opening.

Forty concurrent deletes through one deployer used to open forty streams (forty more
connections, and every container event sent forty times). Now the driver holds one
:class:`ExitHub`: the first drain opens its stream, later ones share it, the last one to leave
closes it. The stream is read by one task at a time, one per subscribing drain, in that drain's
own task group (no fire-and-forget task): the reader holds a lock while it reads, and when its
drain ends (its task cancelled between two reads: nothing read is lost) the next subscriber's
task takes the lock and reads on from the same response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from asyncdeploy.labels import LABEL_WORKLOAD

if TYPE_CHECKING:  # the watch itself is engine-free: the drain and its fake use it without one
    from asyncdeploy.drivers.engine._address import EngineAddress
    from asyncdeploy.drivers.engine._session import EngineSession

__all__ = [
    "ExitHub",
    "ExitStreamLost",
    "ExitWatch",
    "die_event_exit",
    "gone_event",
    "watch_exits",
]

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


def gone_event(raw: dict[str, Any]) -> str | None:
    """The id of one of asyncdeploy's containers a removal event reports (Docker ``destroy``,
    Podman ``remove``); None for any other event."""
    if (raw.get("Action") or raw.get("status")) not in ("destroy", "remove"):
        return None
    actor = raw.get("Actor") or {}
    ident = str(raw.get("id") or actor.get("ID") or "")
    return ident if ident and LABEL_WORKLOAD in (actor.get("Attributes") or {}) else None


@attrs.define
class ExitWatch:
    """What the stream has reported so far, and a way to wait for one container's exit.

    Every death is numbered in the order the stream reports it: a drain takes a :meth:`mark`
    before it signals a container and waits for a death *after* it. A container that died
    earlier (it crashed during its hook) and was restarted under its restart policy is still
    running: its old ``die`` record must not end the wait for its new life.
    """

    _deaths: dict[str, list[tuple[int, int | None]]] = attrs.field(factory=dict)
    _gone: set[str] = attrs.field(factory=set)
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

    def record_gone(self, ident: str) -> None:
        self._gone.add(ident)
        waiter = self._waiters.pop(ident, None)
        if waiter is not None:
            waiter.set()

    def is_gone(self, ident: str) -> bool:
        """True when the stream has reported the container removed."""
        return ident in self._gone

    def last_exit(self, ident: str) -> tuple[bool, int | None]:
        """(whether the stream has reported a death of the container, its last exit code)."""
        deaths = self._deaths.get(ident)
        return (True, deaths[-1][1]) if deaths else (False, None)

    async def wait_change(self, idents: Sequence[str], until: float) -> None:
        """Return once the stream reports a death or a removal of one of ``idents`` (or is
        lost), or at ``until`` (on anyio's clock)."""
        with anyio.move_on_at(until):
            async with anyio.create_task_group() as tg:

                async def one(ident: str) -> None:
                    await self._waiters.setdefault(ident, anyio.Event()).wait()
                    tg.cancel_scope.cancel()

                for ident in idents:
                    tg.start_soon(one, ident)

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


@attrs.define
class _Epoch:
    """One opening of the stream, and the drains that read it: ends with its last drain."""

    watch: ExitWatch = attrs.field(factory=ExitWatch)
    users: int = 0
    baton: anyio.Lock = attrs.field(factory=anyio.Lock)  # held by the one task reading
    session: EngineSession | None = None
    response: Any = None
    pending: bytes = b""  # the start of a line not yet complete

    def take(self, chunk: bytes) -> None:
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            if (died := die_event_exit(raw)) is not None:
                self.watch.record(*died)
            elif (gone := gone_event(raw)) is not None:
                self.watch.record_gone(gone)


class ExitHub:
    """The exit stream of one engine, shared by every drain that subscribes meanwhile. Its own
    client, so it never takes a connection from the driver's pool. Pass the ``api_version`` the
    driver already knows: asking for it again (``auto``) costs 0.3 s on Podman."""

    def __init__(
        self, url: EngineAddress | str, api_version: str = "auto", *, labelled: bool = False
    ) -> None:
        self.url, self.api_version = url, api_version
        self.labelled = labelled  # the engine filters by label (Docker): only ours are sent
        self._epoch: _Epoch | None = None
        self.openings = 0  # how many streams were opened (the benchmark counts them)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[ExitWatch]:
        """The shared watch; yields at once, while the stream opens (:meth:`ExitWatch.settled`)."""
        epoch = self._epoch
        if epoch is None or epoch.watch.lost:  # a lost stream is opened afresh for newcomers
            epoch = self._epoch = _Epoch()
        epoch.users += 1
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read, epoch)
                try:
                    yield epoch.watch
                finally:
                    tg.cancel_scope.cancel()
        finally:
            epoch.users -= 1
            if epoch.users == 0:
                if self._epoch is epoch:
                    self._epoch = None
                epoch.watch.lose()
                with anyio.CancelScope(shield=True):
                    await _close(epoch)

    async def _read(self, epoch: _Epoch) -> None:
        async with epoch.baton:
            if epoch.watch.lost:
                return
            try:
                if epoch.response is None:
                    try:
                        await self._open(epoch)
                    except anyio.get_cancelled_exc_class():
                        with anyio.CancelScope(shield=True):  # the next reader opens afresh
                            await _close(epoch)
                            epoch.session = epoch.response = None
                        raise
                    epoch.watch.open()  # headers received: every later exit reaches it
                while chunk := await epoch.response.content.readany():
                    epoch.take(chunk)
            except Exception:  # noqa: BLE001 - never opened, or cut: waiters fall back to waits
                epoch.watch.lose()
                return
            epoch.watch.lose()  # the engine ended it

    async def _open(self, epoch: _Epoch) -> None:
        from asyncdeploy.drivers.engine._session import EngineSession

        self.openings += 1
        epoch.session = EngineSession.open(self.url, engine="", client_api_version=self.api_version)
        # Podman 4.3's compatible stream delivers nothing under an ``event`` or ``label``
        # filter: there every container event comes, and asyncdeploy's are kept here.
        filters = {"type": ["container"]}
        if self.labelled:
            filters["label"] = [LABEL_WORKLOAD]
        params = {"filters": json.dumps(filters)}
        with anyio.fail_after(OPEN_TIMEOUT):
            # aiodocker's ``_query`` leaves the response to its caller: closed with the epoch.
            async with epoch.session.query(
                "events", method="GET", params=params, timeout=None
            ) as response:
                epoch.response = response


async def _close(epoch: _Epoch) -> None:
    if epoch.response is not None:
        epoch.response.close()  # an endless stream: never read to its end, never released
    if epoch.session is not None:
        await epoch.session.aclose()


def watch_exits(url: str, api_version: str = "auto") -> AbstractAsyncContextManager[ExitWatch]:
    """The exit stream of asyncdeploy's containers on the engine at ``url``, on its own."""
    return ExitHub(url, api_version).subscribe()
