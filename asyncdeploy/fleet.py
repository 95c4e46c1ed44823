"""Several engines drained as one: one deadline, one event stream naming each event's engine.

A control plane that runs workloads on several engines (the local Docker, a remote daemon, a
docker context, Podman, a cluster) takes them down together::

    async with open_fleet({"here": {"driver": "docker"},
                           "far": {"driver": "docker", "docker_context": "far"}}) as fleet:
        async with fleet.terminate_all("app=chat", grace_period_seconds=30) as drain:
            async for item in drain:         # FleetEvent(engine="far", event=SignalSent(...))
                print(item.engine, item)
        print(drain.summaries)               # {"here": (DrainSummary, ...), "far": (...)}

Built on the public :class:`~asyncdeploy.Deployer` API only: each engine's drain is its
deployer's ``terminate_all``, all begun at once. With ``grace_period_seconds`` they share one
deadline: each engine's drain is given the whole seconds left of it when it begins, and at
the deadline whatever still runs on any engine is killed (``kill()``: an engine whose look was
slow began its drain late, and its own deadline is that much later); without it each workload keeps its
plan's grace, from the same start. An engine whose drain fails (its engine went away, a step
failed) never stops the others: an :class:`EngineFailed` item says so in the stream, and the
block raises :class:`FleetDrainError` on exit, once every engine's drain has ended.
``kill()`` cuts every engine's drain short, as :meth:`Drain.kill` does one.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import attrs
from anyio.abc import ObjectReceiveStream

from asyncdeploy._errors import AsyncDeployError, DrainError
from asyncdeploy._event_stream import event_stream
from asyncdeploy._events import DrainEvent, DrainSummary
from asyncdeploy._opening import open_deployer
from asyncdeploy._operations import Drain
from asyncdeploy._selectors import SelectorLike
from asyncdeploy.deployer import Deployer

__all__ = ["EngineFailed", "Fleet", "FleetDrain", "FleetDrainError", "FleetEvent", "open_fleet"]


@attrs.frozen(kw_only=True)
class FleetEvent:
    """One engine's drain event, named by the engine it happened on."""

    engine: str
    event: DrainEvent


@attrs.frozen(kw_only=True)
class EngineFailed:
    """An engine's drain ended in an error (the others go on): ``DrainError`` when steps
    failed, ``DrainUnreachable`` / ``EngineUnavailable`` when the engine went away."""

    engine: str
    error: AsyncDeployError


FleetItem = FleetEvent | EngineFailed


class FleetDrainError(DrainError):
    """Some engines' drains failed; ``failures`` names each with its error, ``summaries`` holds
    every workload's summary of every engine."""

    def __init__(
        self, failures: Mapping[str, AsyncDeployError], summaries: tuple[DrainSummary, ...]
    ) -> None:
        self.failures = dict(failures)
        self.summaries = summaries
        AsyncDeployError.__init__(
            self,
            "drain finished with errors: "
            + "; ".join(f"{engine}: {error}" for engine, error in self.failures.items()),
        )


class FleetDrain:
    """The handle of one drain across engines: an async context manager whose block iterates
    the merged stream of :class:`FleetEvent` and :class:`EngineFailed` items."""

    def __init__(
        self,
        deployers: Mapping[str, Deployer],
        start: Callable[[Deployer, int | None], Drain],
        grace_period_seconds: int | None,
    ) -> None:
        self._deployers = dict(deployers)
        self._start = start
        self._grace = grace_period_seconds
        self._drains: dict[str, Drain] = {}
        self._killed = False
        self._stack: AsyncExitStack | None = None
        self._items: ObjectReceiveStream[FleetItem] | None = None
        self.deadline: float | None = None  # anyio's clock, when a grace period was given
        self.failures: dict[str, AsyncDeployError] = {}
        self._summaries: dict[str, tuple[DrainSummary, ...]] = {}

    @property
    def summaries(self) -> dict[str, tuple[DrainSummary, ...]]:
        """Each engine's drain summaries, as far as its drain got."""
        return dict(self._summaries)

    def stop(self, *, kill: bool = False) -> None:
        """The handles' one verb (``Drain.stop``): ``stop()`` lets every engine's drain run to
        its end, as a drain that has begun always does; ``stop(kill=True)`` is :meth:`kill`."""
        if kill:
            self.kill()

    def kill(self) -> None:
        """Cut every engine's drain short (survivors SIGKILLed, everything removed); the events
        keep coming. A drain not begun yet begins killed."""
        self._killed = True
        for drain in self._drains.values():
            drain.kill()

    def grace_left(self) -> int | None:
        """The whole seconds left to the shared deadline (0 past it); None without one."""
        if self.deadline is None:
            return None
        return max(0, math.floor(self.deadline - anyio.current_time()))

    async def _drain_one(self, engine: str, emit: Callable[[FleetItem], None]) -> None:
        drain: Drain | None = None
        try:
            drain = self._drains[engine] = self._start(self._deployers[engine], self.grace_left())
            if self._killed:
                drain.kill()  # before it begins: it runs at grace 0
            async with drain:
                async for event in drain:
                    emit(FleetEvent(engine=engine, event=event))
        except Exception as exc:  # noqa: BLE001 - one engine's failure never cuts the others'
            error = exc if isinstance(exc, AsyncDeployError) else AsyncDeployError(repr(exc))
            if error is not exc:
                error.__cause__ = exc
            self.failures[engine] = error
            emit(EngineFailed(engine=engine, error=error))
        finally:
            self._summaries[engine] = drain.summaries if drain is not None else ()

    async def _run(self, emit: Callable[[FleetItem], None]) -> None:
        async with anyio.create_task_group() as outer:
            if self.deadline is not None:
                outer.start_soon(self._at_deadline, self.deadline)
            async with anyio.create_task_group() as tg:
                for engine in self._deployers:
                    tg.start_soon(self._drain_one, engine, emit)
            outer.cancel_scope.cancel()  # every drain ended: no deadline left to keep

    async def _at_deadline(self, deadline: float) -> None:
        """At the shared deadline, what still runs on any engine is killed: an engine whose
        look was slow began its drain late, with a deadline of its own that much later."""
        await anyio.sleep_until(deadline)
        self.kill()

    async def __aenter__(self) -> Self:
        if self._grace is not None:
            self.deadline = anyio.current_time() + self._grace
        async with AsyncExitStack() as stack:
            self._items = await stack.enter_async_context(
                event_stream(self._run, finish_on_error=True)
            )
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._stack is not None and self._items is not None
        if exc is None:
            async for _ in self._items:  # the rest of the stream: every drain to its end
                pass
        await self._stack.__aexit__(exc_type, exc, tb)
        if exc is None and self.failures:
            every = tuple(s for summaries in self._summaries.values() for s in summaries)
            raise FleetDrainError(self.failures, every)

    def __aiter__(self) -> AsyncIterator[FleetItem]:
        return self

    async def __anext__(self) -> FleetItem:
        assert self._items is not None, "iterate inside `async with`"
        try:
            return await self._items.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


@attrs.frozen
class Fleet:
    """Deployers on several engines, each under a name of the caller's choosing."""

    deployers: Mapping[str, Deployer]

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(self.deployers)

    def terminate_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
        all: bool = False,
    ) -> FleetDrain:
        """Drain what ``selector`` matches on every engine, under one deadline (see the module
        docstring); as :meth:`Deployer.terminate_all` for each (``all=True``: everything)."""

        def start(deployer: Deployer, grace: int | None) -> Drain:
            return deployer.terminate_all(selector, grace_period_seconds=grace, all=all)

        return FleetDrain(self.deployers, start, grace_period_seconds)

    async def delete_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
        all: bool = False,
    ) -> dict[str, tuple[DrainSummary, ...]]:
        """:meth:`terminate_all`, its events read and dropped; each engine's summaries."""
        async with self.terminate_all(
            selector, grace_period_seconds=grace_period_seconds, all=all
        ) as drain:
            async for _ in drain:
                pass
        return drain.summaries


@asynccontextmanager
async def open_fleet(engines: Mapping[str, Mapping[str, Any]]) -> AsyncIterator[Fleet]:
    """Open a deployer per engine: ``{name: open_deployer's arguments}`` (``driver`` and that
    driver's options, e.g. ``{"driver": "docker", "docker_context": "far"}``), one after the
    other. An engine that does not answer raises its ``EngineUnavailable`` (naming its
    address) before anything is drained; those opened are closed again."""
    if not engines:
        raise ValueError("a fleet needs at least one engine")
    async with AsyncExitStack() as stack:
        opened: dict[str, Deployer] = {}
        for name, options in engines.items():  # in turn: the exit stack is one task's
            opened[name] = await stack.enter_async_context(open_deployer(**options))
        yield Fleet(opened)
