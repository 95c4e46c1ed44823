"""The public awaitable API: create workloads, drain them with live events (opened by
:func:`asyncdeploy.open_deployer`)::

    async with open_deployer("docker") as deployer:
        await deployer.create(plan)
        # or, with the image pulls (and a replacement's drain) as they happen:
        async with deployer.creating(plan) as events:
            async for event in events:
                print(event)
        result = events.result
        async with deployer.terminate("demo", grace_period_seconds=10) as events:
            async for event in events:
                print(event)
        # or, without events:
        summary = await deployer.delete("demo")
        # a zero-downtime replacement: the new instance first, ready, then the old one drained
        result = await deployer.replace(new_plan)

The deployer needs asyncio (its engine clients, aiodocker and kubernetes-asyncio, run on aiohttp);
opened under trio it raises :class:`~asyncdeploy.errors.UnsupportedEventLoop`. The server kit,
:mod:`asyncdeploy.workload`, runs on both.
"""

from __future__ import annotations

import builtins
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import anyio
import attrs
from anyio.abc import ObjectReceiveStream

from asyncdeploy._log import log_event
from asyncdeploy.drivers.base import Driver, Found
from asyncdeploy.errors import (
    AsyncDeployError,
    DrainError,
    DrainUnreachable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, Emit, Event
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.pull_events import PullEvent
from asyncdeploy.results import ApplyResult, ExecResult, WorkloadStatus
from asyncdeploy.selectors import SelectorLike, as_selector

__all__ = [
    "CreateEvents",
    "Deployer",
    "ReplaceResult",
    "Replacement",
]


@attrs.frozen(kw_only=True)
class Replacement:
    """A replacement in progress: the new instance (ready) and the old ones' drain events."""

    new: WorkloadStatus
    old: tuple[str, ...]
    events: ObjectReceiveStream[DrainEvent]


@attrs.frozen(kw_only=True)
class ReplaceResult:
    """A finished replacement: the new instance and one drain summary per old instance."""

    new: WorkloadStatus
    drained: tuple[DrainSummary, ...]


E = TypeVar("E", bound=Event)


class CreateEvents:
    """The events of one create, iterated as they come; ``result`` once they have all come."""

    def __init__(self, events: ObjectReceiveStream[Event]) -> None:
        self._events = events
        self._result: ApplyResult | None = None

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events.__aiter__()

    async def receive(self) -> Event:
        return await self._events.receive()

    @property
    def result(self) -> ApplyResult:
        """What the create did; set when the event stream has ended."""
        if self._result is None:
            raise RuntimeError("the create has not finished: read the events to their end first")
        return self._result


@attrs.define
class Deployer:
    """One open driver and the operations on it. Get one from :func:`open_deployer`."""

    driver: Driver

    @property
    def driver_name(self) -> str:
        return self.driver.name

    async def create(self, plan: WorkloadPlan, *, on_event: Emit | None = None) -> ApplyResult:
        """Create the workload; unchanged plans are a no-op, changed ones replace it gracefully
        (when the old one's drain fails, its ``DrainError`` is raised and nothing is created).

        Images are pulled first, as the plan's pull policies say; ``on_event`` sees the pull
        events (and a replacement's drain events) as they happen, and must not block.
        """
        return await self.driver.apply(plan, emit=on_event)

    @asynccontextmanager
    async def creating(self, plan: WorkloadPlan) -> AsyncIterator[CreateEvents]:
        """Create the workload, yielding its pull events (and a replacement's drain events).

        After the stream ends, ``events.result`` is the :class:`ApplyResult`. An exception or a
        cancellation in the block cancels the create; what it had created is removed.
        """
        events: CreateEvents | None = None

        async def work(emit: Emit) -> None:
            result = await self.driver.apply(plan, emit=emit)
            assert events is not None
            events._result = result

        async with self._streaming(work) as stream:
            events = CreateEvents(stream)
            yield events

    async def get(self, name: str) -> WorkloadStatus:
        return await self.driver.get(name)

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        """Workloads whose labels match ``selector``: a :class:`~asyncdeploy.selectors.Selector`,
        a Kubernetes selector string (``"team=ml,tier in (gpu)"``) or ``{label: value}``."""
        return await self.driver.list(as_selector(selector))

    async def wait_ready(self, name: str, *, timeout: float = 60) -> WorkloadStatus:
        return await self.driver.wait_ready(name, timeout=timeout)

    def logs(
        self,
        name: str,
        *,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """A container's output (default: the first run container of the plan).

        ``tail`` keeps the last lines, ``since`` is a Unix time, ``timestamps`` prefixes each
        line with the engine's RFC 3339 time.
        """
        return self.driver.logs(
            name, container=container, follow=follow, tail=tail, since=since, timestamps=timestamps
        )

    async def exec(
        self, name: str, command: Sequence[str], *, container: str | None = None
    ) -> ExecResult:
        return await self.driver.exec(name, command, container=container)

    async def inspect(self, name: str) -> dict[str, Any]:
        return await self.driver.inspect(name)

    @asynccontextmanager
    async def terminate(
        self,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        kill_now: anyio.Event | None = None,
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        """Drain one workload, yielding its events as they happen.

        Leaving the block early lets the drain finish; an exception or a cancellation in the
        block cancels it, and the driver's shielded cleanup still kills and removes everything
        (the events of that cleanup are then not delivered: the block is gone). Setting
        ``kill_now`` cuts the drain short instead while the events keep flowing: survivors are
        SIGKILLed at once (also while the drain is still starting, or follows another
        delete's), everything is removed, and ``DrainFinished`` still arrives; the block then
        raises as after a full drain: ``DrainError`` when something could not be removed,
        ``DrainUnreachable`` when the engine went away.
        Raises ``DrainError`` on exit when some step failed, and ``WorkloadNotFound`` before any
        event when there is no such workload (the driver's one look, which the drain starts
        from).
        """
        found = await self.driver.find([name])
        async with self._drain(found, grace_period_seconds, kill_now) as events:
            yield events

    @asynccontextmanager
    async def terminate_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
        kill_now: anyio.Event | None = None,
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        """Drain every workload ``selector`` matches (every one for ``None``) concurrently
        under one deadline (``kill_now``: as for :meth:`terminate`), from one look at them all;
        none matching yields no event. An invalid selector raises ``SelectorError`` before any
        call."""
        found = await self.driver.find_matching(as_selector(selector))
        async with self._drain(found, grace_period_seconds, kill_now) as events:
            yield events

    async def delete(self, name: str, *, grace_period_seconds: int | None = None) -> DrainSummary:
        """Drain and remove one workload; return its summary."""
        async with self.terminate(name, grace_period_seconds=grace_period_seconds) as events:
            summaries = [e.summary async for e in events if isinstance(e, DrainFinished)]
        return summaries[0]

    async def delete_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> builtins.list[DrainSummary]:
        """Drain and remove every matching workload; none matching is not an error."""
        async with self.terminate_all(
            selector, grace_period_seconds=grace_period_seconds
        ) as events:
            return [e.summary async for e in events if isinstance(e, DrainFinished)]

    async def replace(
        self,
        plan: WorkloadPlan,
        *,
        old: Sequence[str] | None = None,
        new_name: str | None = None,
        ready_timeout: float = 60,
        grace_period_seconds: int | None = None,
        on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None,
    ) -> ReplaceResult:
        """Replace a workload without downtime; see :meth:`replacing`."""
        async with self.replacing(
            plan,
            old=old,
            new_name=new_name,
            ready_timeout=ready_timeout,
            grace_period_seconds=grace_period_seconds,
            on_ready=on_ready,
        ) as replacement:
            summaries = [
                e.summary async for e in replacement.events if isinstance(e, DrainFinished)
            ]
        return ReplaceResult(new=replacement.new, drained=tuple(summaries))

    @asynccontextmanager
    async def replacing(
        self,
        plan: WorkloadPlan,
        *,
        old: Sequence[str] | None = None,
        new_name: str | None = None,
        ready_timeout: float = 60,
        grace_period_seconds: int | None = None,
        on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None,
    ) -> AsyncIterator[Replacement]:
        """Start ``plan`` as a new instance, wait until it is ready, then drain the old ones.

        The new instance is named ``new_name`` (default ``<plan.name>-<6 hex>``) and labelled
        ``replace.asyncdeploy.io/instance-of=<plan.name>``. The old ones are ``old``, or by default the
        workload named ``plan.name`` and every earlier instance of it. A load balancer follows
        readiness: it adds the new instance once its readiness check passes (``on_ready`` is
        awaited then, before any drain: register it there if your balancer is told, not polled),
        and the old one leaves rotation when its drain fails its readiness check, before its
        listener closes. If the new instance never becomes ready it is removed and the old
        ones are left untouched.
        """
        new_name = new_name or f"{plan.name[:56]}-{secrets.token_hex(3)}"
        if await self._exists(new_name):
            raise WorkloadConflict(
                f"cannot start the replacement as {new_name!r}: a workload has that name",
                engine=self.driver_name,
                status=409,
            )
        if old is None:
            instances = await self.driver.list({LABEL_INSTANCE_OF: plan.name})
            named = [plan.name] if await self._exists(plan.name) else []
            old = [*named, *(w.name for w in instances if w.name != plan.name)]
        else:
            await self.driver.find(old)  # a clear WorkloadNotFound before anything starts
        old = tuple(old)
        new_plan = attrs.evolve(
            plan, name=new_name, labels={**plan.labels, LABEL_INSTANCE_OF: plan.name}
        )
        await self.driver.apply(new_plan)
        try:
            status = await self.driver.wait_ready(new_name, timeout=ready_timeout)
            if on_ready is not None:
                await on_ready(status)
        except BaseException:
            # the old instances were never touched; only the new one goes (errors of this
            # cleanup must not hide why the replacement failed)
            with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                try:
                    await self.delete(new_name, grace_period_seconds=0)
                except AsyncDeployError:
                    pass
            raise
        found = await self.driver.find(old)  # afresh: they may have changed while it started
        async with self._drain(found, grace_period_seconds, None) as events:
            yield Replacement(new=status, old=old, events=events)

    async def _exists(self, name: str) -> bool:
        try:
            await self.driver.get(name)
        except WorkloadNotFound:
            return False
        return True

    @asynccontextmanager
    async def _drain(
        self, found: Found, grace_period_seconds: int | None, kill_now: anyio.Event | None
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        summaries: builtins.list[DrainSummary] = []
        unreachable: builtins.list[DrainUnreachable] = []

        async def work(emit: Callable[[DrainEvent], None]) -> None:
            def keep(event: DrainEvent) -> None:
                # Summaries come from the events, not the return value: a drain cut short by
                # kill_now (cancelled) returns nothing, but still finishes every workload.
                if isinstance(event, DrainFinished):
                    summaries.append(event.summary)
                emit(event)

            async with anyio.create_task_group() as tg:
                if kill_now is not None:
                    tg.start_soon(_cancel_when_set, kill_now, tg.cancel_scope)
                try:
                    if found.names:
                        await self.driver.drain(  # a drain emits drain events only
                            found, grace_period_seconds=grace_period_seconds, emit=cast(Emit, keep)
                        )
                except DrainUnreachable as exc:
                    unreachable.append(exc)  # raised once the consumer has every event
                tg.cancel_scope.cancel()  # stop watching kill_now

        async with self._streaming(work) as receive:
            yield receive
        if unreachable:
            raise unreachable[0]
        if any(c.outcome == "unreachable" for s in summaries for c in s.containers):
            raise DrainUnreachable(summaries, engine=self.driver_name)  # cut short meanwhile
        failed = [s for s in summaries if s.errors]
        if failed:
            raise DrainError(failed)

    @asynccontextmanager
    async def _streaming(
        self, work: Callable[[Callable[[E], None]], Awaitable[None]]
    ) -> AsyncIterator[ObjectReceiveStream[E]]:
        """Run ``work`` in a task group of its own; what it emits reaches the consumer through a
        stream fed with ``send_nowait``, unbounded so that a slow consumer never delays the work
        (the backlog is bounded by the work itself: a handful of events per container, at most
        five progress events a second per image pulled)."""
        send, receive = anyio.create_memory_object_stream[E](math.inf)

        def emit(event: E) -> None:
            if not isinstance(event, PullEvent):
                log_event(event)  # every drain step, through the one place events pass
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # the consumer left; the work goes on without it

        async def run() -> None:
            with send:
                await work(emit)

        try:
            with receive:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    yield receive
        except BaseExceptionGroup as group:
            raise _lone_error(group) from None

    async def aclose(self) -> None:
        await self.driver.aclose()


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()  # the drain's shielded cleanup kills the survivors and removes everything


def _lone_error(group: BaseExceptionGroup) -> BaseException:
    """The one real error of a task group (e.g. WorkloadNotFound before anything was touched),
    or the group itself when there are several."""
    errors = [e for e in group.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
    if len(errors) == 1:
        if isinstance(errors[0], BaseExceptionGroup):
            return _lone_error(errors[0])
        return errors[0]
    return group
