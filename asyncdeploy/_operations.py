"""The handle of one operation: its events, ``stop()``, the summaries of what it drained and
the verdict on them.

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

The handle is the one owner of a drain's verdict: each ``DrainFinished`` its work emits is
recorded here once, as it is emitted (so a block left early still has them all), and on a
normal exit a :class:`Drain` raises ``DrainUnreachable`` or ``DrainError`` from them. Below it,
drivers only drain and emit; above it, the CLI reads :attr:`Operation.summaries`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Generic, Literal, Protocol, Self, TypeVar, cast

import anyio
from anyio.abc import ObjectReceiveStream

from asyncdeploy._errors import DrainError, DrainUnreachable
from asyncdeploy._event_stream import event_stream
from asyncdeploy._events import DrainEvent, DrainFinished, DrainSummary, Emit, Event
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import ApplyResult, WorkloadStatus
from asyncdeploy.drivers.base import Drains, Found
from asyncdeploy.replace.events import ReplaceEvent

__all__ = ["CreateEvents", "Drain", "Operation", "Replacement", "draining"]

E = TypeVar("E", bound=Event | ReplaceEvent)
E_co = TypeVar("E_co", covariant=True)
Started = TypeVar("Started")


class Receiving(Protocol[E_co]):
    """What an operation reads its events from: a stream, or another operation."""

    async def receive(self) -> E_co: ...


class Operation(Generic[E, Started]):
    """One operation: entered, it starts; iterated, its events; :meth:`stop` ends it early;
    :attr:`summaries`, one per drain its work has finished."""

    def __init__(
        self,
        start: Callable[[KillSwitch], AbstractAsyncContextManager[Started]],
        *,
        switch: KillSwitch | None = None,
    ) -> None:
        self._start = start
        # an operation run inside another (a replace's drains) is cut short by the outer one's
        self._switch = switch or KillSwitch()
        self._context: AbstractAsyncContextManager[Started] | None = None
        self._events: Receiving[E] | None = None
        self._summaries: list[DrainSummary] = []
        self._stop_asked = False
        self._stop: anyio.CancelScope | None = None

    def _started(self, started: Started) -> Receiving[E]:
        """The events of what the start yielded (subclasses also keep what else it holds)."""
        return cast(Receiving[E], started)  # Operation[E, ObjectReceiveStream[E]]

    def _record(self, event: object) -> None:
        """Every event the operation's work emits passes here, once, as it is emitted: the one
        place a summary is kept (a drain cut short returns nothing, but emits every one)."""
        if isinstance(event, DrainFinished):
            self._summaries.append(event.summary)

    def _verdict(self) -> Exception | None:
        """The error the operation ends with when its block ended normally (none here)."""
        return None

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
        suppressed = await self._context.__aexit__(kind, error, traceback)
        if kind is None and (verdict := self._verdict()) is not None:
            raise verdict  # raised once the consumer has had every event
        return suppressed

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
        return await self._events.receive()

    def stop(self, *, kill: bool = False) -> None:
        """Stop the operation early while its events go on to their end: the one verb.

        ``stop()`` stops it as a cancellation would, never turning a drain into a kill: a create
        removes what it made, and a drain that has begun (a delete's, the one of the workload a
        create replaces) runs to its end. ``stop(kill=True)`` cuts every drain of the operation
        short instead: survivors SIGKILLed now (at grace 0 when it has not begun), everything
        still removed, ``DrainFinished`` still reported; the rest of the operation goes on (a
        create whose old workload was killed still makes the new one, unless ``stop()`` came
        too). The CLI's signal table asks for one or the other (``cli/_signals.py``)."""
        if kill:
            self._switch.kill()
            return
        self._stop_asked = True
        if self._stop is not None:
            self._stop.cancel()

    def kill(self) -> None:
        """``stop(kill=True)``: cut every drain of the operation short, now or at grace 0."""
        self.stop(kill=True)

    def _stoppable(self) -> anyio.CancelScope:
        """The scope work that :meth:`stop` ends runs in (a drain has none: it is never stopped
        gently)."""
        self._stop = anyio.CancelScope()
        if self._stop_asked:
            self._stop.cancel()
        return self._stop

    @property
    def killed(self) -> bool:
        """Whether ``stop(kill=True)`` (or :meth:`kill`) was called."""
        return self._switch.thrown

    @property
    def summaries(self) -> tuple[DrainSummary, ...]:
        """One per drain finished so far (every one, once the block has ended)."""
        return tuple(self._summaries)


class Drain(Operation[DrainEvent, ObjectReceiveStream[DrainEvent]]):
    """A drain (``terminate``, ``terminate_all``): raises ``DrainError`` on exit when a step
    failed, ``DrainUnreachable`` when the engine went away, ``WorkloadNotFound`` on entry.
    ``stop()`` leaves it running to its end; ``stop(kill=True)`` cuts it short."""

    def __init__(
        self,
        start: Callable[[KillSwitch], AbstractAsyncContextManager[ObjectReceiveStream[DrainEvent]]],
        *,
        switch: KillSwitch | None = None,
    ) -> None:
        super().__init__(start, switch=switch)
        self._engine = ""
        self._lost: DrainUnreachable | None = None  # the driver said the engine went away

    @asynccontextmanager
    async def stream(
        self,
        driver: Drains,
        found: Found,
        grace_period_seconds: int | None,
        *,
        keep_volumes: bool = False,
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        """Drain what ``found`` holds, its events on a stream: what every drain's start yields.
        The kill switch cuts it short (thrown before the drain began: grace 0)."""
        self._engine = driver.name

        async def work(emit: Callable[[DrainEvent], None]) -> None:
            def record(event: DrainEvent) -> None:
                self._record(event)
                emit(event)

            async def drain(grace: int | None) -> None:
                if not found.names:
                    return
                try:
                    await driver.drain(  # a drain emits drain events only
                        found,
                        grace_period_seconds=grace,
                        emit=cast(Emit, record),
                        # only when asked: drivers written before it need not know it
                        **({"keep_volumes": True} if keep_volumes else {}),
                    )
                except DrainUnreachable as exc:
                    self._lost = self._lost or exc  # the verdict, once the consumer has all

            if self._switch.thrown:  # before the drain: no container's drain exists to cut
                await drain(0)
            else:
                with self._switch.guarding():
                    await drain(grace_period_seconds)

        async with event_stream(work, finish_on_error=True) as receive:
            yield receive

    def _verdict(self) -> Exception | None:
        if self._lost is not None:
            return self._lost
        summaries = self._summaries
        if any(c.outcome == "unreachable" for s in summaries for c in s.containers):
            return DrainUnreachable(summaries, engine=self._engine)  # cut short meanwhile
        failed = [s for s in summaries if s.errors]
        return DrainError(failed) if failed else None


def draining(
    driver: Drains,
    look: Callable[[], Awaitable[Found]],
    grace_period_seconds: int | None,
    *,
    keep_volumes: bool = False,
    switch: KillSwitch | None = None,
    then: Callable[[Found], Awaitable[None]] | None = None,
) -> Drain:
    """The handle of a drain of what ``look`` finds (its one look, made on entry); ``switch``:
    the kill switch of the operation it runs in (a replace's); ``then``: what follows a drain
    that ran to its end (a delete's: the replace lock's remains of a plan now gone)."""

    @asynccontextmanager
    async def start(_: KillSwitch) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        found = await look()
        async with drain.stream(
            driver, found, grace_period_seconds, keep_volumes=keep_volumes
        ) as events:
            yield events
        if then is not None:
            await then(found)

    drain = Drain(start, switch=switch)
    return drain


class CreateEvents(Operation[Event | ReplaceEvent, ObjectReceiveStream[Event | ReplaceEvent]]):
    """A create: its pull events, a replaced workload's drain events, and for a changed plan the
    replacement's own events; ``result`` once they have all come. :meth:`stop` stops it as a
    cancellation does (it removes what it made; a drain of the workload it replaces that has
    begun runs to its end, cut short only with ``kill=True``) while the events go on."""

    def __init__(
        self,
        start: Callable[
            [KillSwitch], AbstractAsyncContextManager[ObjectReceiveStream[Event | ReplaceEvent]]
        ],
    ) -> None:
        super().__init__(start)
        self._result: ApplyResult | None = None

    def _finished(self, result: ApplyResult) -> None:
        self._result = result

    @property
    def stopped(self) -> bool:
        """True when :meth:`stop` ended the create before it had finished."""
        return self._result is None and self._stop_asked

    @property
    def result(self) -> ApplyResult:
        """What the create did; set when the event stream has ended."""
        if self._result is None:
            raise RuntimeError("the create has not finished: read the events to their end first")
        return self._result


class ReplaceStarted(Protocol):
    """What a replacement's start yields (``replace._run.Replaced``), as the handle reads it."""

    @property
    def new(self) -> WorkloadStatus: ...
    @property
    def old(self) -> tuple[str, ...]: ...
    @property
    def strategy(self) -> Literal["surge", "recreate"]: ...
    @property
    def drained(self) -> tuple[DrainSummary, ...]: ...
    @property
    def downtime(self) -> float | None: ...
    @property
    def drain(self) -> Drain | None: ...


class _NoEvents:
    async def receive(self) -> DrainEvent:
        raise anyio.EndOfStream


_NO_EVENTS = _NoEvents()


class Replacement(Operation[DrainEvent, ReplaceStarted]):
    """A replacement, entered once the new instance is ready (surge) or once the old ones are
    drained and the new one is ready (recreate): ``new``, ``old``, ``strategy``, ``drained``
    (recreate: the old ones' summaries), ``downtime``; iterated, the old ones' drain events.
    ``stop()`` is its caller's to do before it is entered (cancel the block: the new instance is
    removed, the old ones keep serving); ``stop(kill=True)`` cuts a drain short."""

    new: WorkloadStatus
    old: tuple[str, ...]
    strategy: Literal["surge", "recreate"]
    drained: tuple[DrainSummary, ...]
    downtime: float | None
    _drain: Drain | None = None

    def _started(self, started: ReplaceStarted) -> Receiving[DrainEvent]:
        self.new, self.old, self.strategy = started.new, started.old, started.strategy
        self.drained, self.downtime = started.drained, started.downtime
        self._drain = started.drain
        if self._drain is not None:
            return self._drain  # the old ones' drain: its own handle, its own verdict
        return _NO_EVENTS  # recreate: drained before the new one started, nothing follows

    @property
    def summaries(self) -> tuple[DrainSummary, ...]:
        """The old instances' summaries from the drain after entry (surge); ``drained``
        holds a recreate's."""
        return () if self._drain is None else self._drain.summaries

    @property
    def events(self) -> Replacement:
        """The old instances' drain events: the handle itself (``async for e in r.events``)."""
        return self
