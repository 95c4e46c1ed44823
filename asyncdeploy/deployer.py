"""The public awaitable API: open a deployer, create workloads, drain them with live events.

::

    async with open_deployer("docker") as deployer:
        await deployer.create(plan)
        async with deployer.terminate("demo", grace_period_seconds=10) as events:
            async for event in events:
                print(event)
        # or, without events:
        summary = await deployer.delete("demo")
"""

from __future__ import annotations

import builtins
import inspect
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from asyncdeploy.drivers import DRIVERS, connect_driver, driver_class
from asyncdeploy.drivers.base import Driver
from asyncdeploy.errors import DrainError, DrainUnreachable, EngineUnavailable
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.results import ApplyResult, ExecResult, WorkloadStatus

__all__ = ["AUTO_DETECT_ORDER", "DRIVER_NAMES", "Deployer", "open_deployer"]

AUTO_DETECT_ORDER = ("docker", "podman", "kubernetes")
DRIVER_NAMES: tuple[str, ...] = tuple(sorted(DRIVERS))
"""The names ``open_deployer`` and ``--driver`` accept."""
EVENT_BUFFER = 64


class _EventRelay:
    """Takes events without ever blocking the drain, and hands them on at the consumer's pace.

    The backlog is bounded by the drain itself: a handful of events per container.
    """

    def __init__(self) -> None:
        self._pending: deque[DrainEvent] = deque()
        self._wakeup = anyio.Event()
        self._closed = False

    def emit(self, event: DrainEvent) -> None:
        self._pending.append(event)
        self._wakeup.set()

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()

    async def relay(self, send: ObjectSendStream[DrainEvent]) -> None:
        async with send:
            while True:
                while self._pending:
                    event = self._pending.popleft()
                    try:
                        await send.send(event)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        self._pending.clear()  # the consumer left; the drain goes on without it
                if self._closed:
                    return
                await self._wakeup.wait()
                self._wakeup = anyio.Event()


@attrs.define
class Deployer:
    """One open driver and the operations on it. Get one from :func:`open_deployer`."""

    driver: Driver

    @property
    def driver_name(self) -> str:
        return self.driver.name

    async def create(self, plan: WorkloadPlan) -> ApplyResult:
        """Create the workload; unchanged plans are a no-op, changed ones replace it gracefully."""
        return await self.driver.apply(plan)

    async def get(self, name: str) -> WorkloadStatus:
        return await self.driver.get(name)

    async def list(
        self, selector: Mapping[str, str] | None = None
    ) -> builtins.list[WorkloadStatus]:
        return await self.driver.list(selector)

    async def wait_ready(self, name: str, *, timeout: float = 60) -> WorkloadStatus:
        return await self.driver.wait_ready(name, timeout=timeout)

    def logs(
        self, name: str, *, container: str | None = None, follow: bool = False
    ) -> AsyncIterator[str]:
        return self.driver.logs(name, container=container, follow=follow)

    async def exec(
        self, name: str, command: Sequence[str], *, container: str | None = None
    ) -> ExecResult:
        return await self.driver.exec(name, command, container=container)

    async def inspect(self, name: str) -> dict[str, Any]:
        return await self.driver.inspect(name)

    @asynccontextmanager
    async def terminate(
        self, name: str, *, grace_period_seconds: int | None = None
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        """Drain one workload, yielding its events as they happen.

        Leaving the block early lets the drain finish; an exception or a cancellation in the
        block cancels it, and the driver's shielded cleanup still kills and removes everything.
        Raises ``DrainError`` on exit when some step failed.
        """
        await self.driver.get(name)  # a clear WorkloadNotFound before the stream opens
        async with self._drain([name], grace_period_seconds) as events:
            yield events

    @asynccontextmanager
    async def terminate_all(
        self,
        selector: Mapping[str, str] | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        """Drain every matching workload concurrently under one deadline."""
        names = [w.name for w in await self.driver.list(selector)]
        async with self._drain(names, grace_period_seconds) as events:
            yield events

    async def delete(self, name: str, *, grace_period_seconds: int | None = None) -> DrainSummary:
        """Drain and remove one workload; return its summary."""
        async with self.terminate(name, grace_period_seconds=grace_period_seconds) as events:
            summaries = [e.summary async for e in events if isinstance(e, DrainFinished)]
        return summaries[0]

    async def delete_all(
        self,
        selector: Mapping[str, str] | None = None,
        *,
        grace_period_seconds: int | None = None,
    ) -> builtins.list[DrainSummary]:
        """Drain and remove every matching workload; none matching is not an error."""
        async with self.terminate_all(
            selector, grace_period_seconds=grace_period_seconds
        ) as events:
            return [e.summary async for e in events if isinstance(e, DrainFinished)]

    @asynccontextmanager
    async def _drain(
        self, names: Sequence[str], grace_period_seconds: int | None
    ) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        relay = _EventRelay()
        summaries: builtins.list[DrainSummary] = []
        unreachable: builtins.list[DrainUnreachable] = []

        async def run() -> None:
            try:
                if names:
                    summaries.extend(
                        await self.driver.drain(
                            names, grace_period_seconds=grace_period_seconds, emit=relay.emit
                        )
                    )
            except DrainUnreachable as exc:
                unreachable.append(exc)  # raised once the consumer has every event
            finally:
                relay.close()

        send, receive = anyio.create_memory_object_stream[DrainEvent](EVENT_BUFFER)
        try:
            with receive:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    tg.start_soon(relay.relay, send)
                    yield receive
        except BaseExceptionGroup as group:
            raise _lone_error(group) from None
        if unreachable:
            raise unreachable[0]
        failed = [s for s in summaries if s.errors]
        if failed:
            raise DrainError(failed)

    async def aclose(self) -> None:
        await self.driver.aclose()


def _lone_error(group: BaseExceptionGroup) -> BaseException:
    """The one real error of a task group (e.g. WorkloadNotFound before anything was touched),
    or the group itself when there are several."""
    errors = [e for e in group.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
    if len(errors) == 1:
        if isinstance(errors[0], BaseExceptionGroup):
            return _lone_error(errors[0])
        return errors[0]
    return group


@asynccontextmanager
async def open_deployer(driver: str | None = None, **options: Any) -> AsyncIterator[Deployer]:
    """Open a deployer on ``driver`` (``docker``, ``podman`` or ``kubernetes``).

    Without a name, the first engine of :data:`AUTO_DETECT_ORDER` that answers is used.
    """
    if driver is None:
        opened = await _first_answering(options)
    else:
        opened = await connect_driver(driver, **options)
    deployer = Deployer(opened)
    try:
        yield deployer
    finally:
        with anyio.CancelScope(shield=True):
            await deployer.aclose()


async def _first_answering(options: Mapping[str, Any]) -> Driver:
    reasons = []
    for name in AUTO_DETECT_ORDER:
        accepted = inspect.signature(driver_class(name).connect).parameters
        if not set(options) <= set(accepted):
            continue  # an option meant for another engine (url= is not a Kubernetes option)
        try:
            return await connect_driver(name, **options)
        except EngineUnavailable as exc:
            reasons.append(f"{name}: {exc.message}")
    raise EngineUnavailable(
        "no engine answers (" + "; ".join(reasons) + ")", engine="/".join(DRIVERS)
    )
