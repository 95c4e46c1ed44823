"""The handle of one operation: its events, ``kill()``, and the summaries of what it drained.

::

    async with deployer.terminate("demo") as drain:
        async for event in drain:       # the events as they happen
            if too_slow(event):
                drain.kill()            # survivors SIGKILLed now; everything is still removed
    print(drain.summaries)

The same shape for ``terminate_all``, ``creating`` and ``replacing``. The handle exists before
the operation starts: ``kill()`` called on it before (or while) it is entered makes each of its
drains run at grace 0. ``kill()`` cancels the waiting only: each driver's shielded cleanup still
kills, removes everything and reports ``DrainFinished``, and the events keep flowing to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Generic, Literal, Self, TypeVar

import anyio
from anyio.abc import ObjectReceiveStream

from asyncdeploy._event_stream import drain_stream
from asyncdeploy._events import DrainEvent, DrainFinished, DrainSummary, Event
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import ApplyResult, WorkloadStatus
from asyncdeploy.drivers.base import Driver, Found
from asyncdeploy.replace._run import Replaced
from asyncdeploy.replace.events import ReplaceEvent

__all__ = ["CreateEvents", "Drain", "Operation", "Replacement", "draining"]

E = TypeVar("E", bound=Event | ReplaceEvent)
Started = TypeVar("Started")


class Operation(Generic[E, Started]):
    """One operation: entered, it starts; iterated, its events; :meth:`kill` cuts its drains
    short; :attr:`summaries`, one per drain whose ``DrainFinished`` has been read."""

    def __init__(self, start: Callable[[KillSwitch], AbstractAsyncContextManager[Started]]) -> None:
        self._start = start
        self._switch = KillSwitch()
        self._context: AbstractAsyncContextManager[Started] | None = None
        self._events: ObjectReceiveStream[E] | None = None
        self._summaries: list[DrainSummary] = []

    def _started(self, started: Started) -> ObjectReceiveStream[E]:
        """The events of what the start yielded (subclasses also keep what else it holds)."""
        return started  # type: ignore[return-value]  # Operation[E, ObjectReceiveStream[E]]

    async def __aenter__(self) -> Self:
        if self._context is not None:
            raise RuntimeError("an operation handle is entered once")
        self._context = self._start(self._switch)
        self._events = self._started(await self._context.__aenter__())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._context is not None
        return await self._context.__aexit__(kind, error, traceback)

    def __aiter__(self) -> AsyncIterator[E]:
        return self

    async def __anext__(self) -> E:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> E:
        """The next event (``anyio.EndOfStream`` after the last)."""
        if self._events is None:
            raise RuntimeError("enter the operation (async with) before reading its events")
        event = await self._events.receive()
        if isinstance(event, DrainFinished):
            self._summaries.append(event.summary)
        return event

    def kill(self) -> None:
        """Cut every drain of the operation short: now, or at grace 0 when it has not begun."""
        self._switch.kill()

    @property
    def killed(self) -> bool:
        """Whether :meth:`kill` was called."""
        return self._switch.thrown

    @property
    def summaries(self) -> tuple[DrainSummary, ...]:
        """One per drain whose ``DrainFinished`` was read (every one, once the events ended)."""
        return tuple(self._summaries)


class Drain(Operation[DrainEvent, ObjectReceiveStream[DrainEvent]]):
    """A drain (``terminate``, ``terminate_all``): raises ``DrainError`` on exit when a step
    failed, ``DrainUnreachable`` when the engine went away, ``WorkloadNotFound`` on entry."""


def draining(
    driver: Driver,
    look: Callable[[], Awaitable[Found]],
    grace_period_seconds: int | None,
    *,
    keep_volumes: bool = False,
) -> Drain:
    """The handle of a drain of what ``look`` finds (its one look, made on entry)."""

    @asynccontextmanager
    async def start(kill: KillSwitch) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        found = await look()
        drain = drain_stream(driver, found, grace_period_seconds, kill, keep_volumes=keep_volumes)
        async with drain as events:
            yield events

    return Drain(start)


class CreateEvents(Operation[Event | ReplaceEvent, ObjectReceiveStream[Event | ReplaceEvent]]):
    """A create: its pull events, a replaced workload's drain events, and for a changed plan the
    replacement's own events; ``result`` once they have all come. :meth:`cancel` stops it as a cancellation does (it removes what it made; a
    drain of the workload it replaces that has begun runs to its end) while the events go on."""

    def __init__(
        self,
        start: Callable[
            [KillSwitch], AbstractAsyncContextManager[ObjectReceiveStream[Event | ReplaceEvent]]
        ],
    ) -> None:
        super().__init__(start)
        self._result: ApplyResult | None = None
        self._stop_asked = False
        self._stop: anyio.CancelScope | None = None

    def cancel(self) -> None:
        """Stop the create (the events keep flowing until it has ended)."""
        self._stop_asked = True
        if self._stop is not None:
            self._stop.cancel()

    def _finished(self, result: ApplyResult) -> None:
        self._result = result

    def _stoppable(self) -> anyio.CancelScope:
        """The scope the create runs in (for the deployer): :meth:`cancel` cancels it."""
        self._stop = anyio.CancelScope()
        if self._stop_asked:
            self._stop.cancel()
        return self._stop

    @property
    def cancelled(self) -> bool:
        """True when :meth:`cancel` stopped the create before it had finished."""
        return self._result is None and self._stop_asked

    @property
    def result(self) -> ApplyResult:
        """What the create did; set when the event stream has ended."""
        if self._result is None:
            raise RuntimeError("the create has not finished: read the events to their end first")
        return self._result


class Replacement(Operation[DrainEvent, Replaced]):
    """A replacement, entered once the new instance is ready (surge) or once the old ones are
    drained and the new one is ready (recreate): ``new``, ``old``, ``strategy``, ``drained``
    (recreate: the old ones' summaries), ``downtime``; iterated, the old ones' drain events."""

    new: WorkloadStatus
    old: tuple[str, ...]
    strategy: Literal["surge", "recreate"]
    drained: tuple[DrainSummary, ...]
    downtime: float | None

    def _started(self, started: Replaced) -> ObjectReceiveStream[DrainEvent]:
        self.new, self.old, self.strategy = started.new, started.old, started.strategy
        self.drained, self.downtime = started.drained, started.downtime
        return started.events

    @property
    def events(self) -> Replacement:
        """The old instances' drain events: the handle itself (``async for e in r.events``)."""
        return self
