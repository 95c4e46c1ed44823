"""The public awaitable API: create workloads, drain them with live events (opened by
:func:`asyncdeploy.open_deployer`)::

    async with open_deployer("docker") as deployer:
        await deployer.create(plan)
        # or, with the image pulls (and a replacement's drain) as they happen:
        async with deployer.creating(plan) as creation:
            async for event in creation:
                print(event)
        result = creation.result
        async with deployer.terminate("demo", grace_period_seconds=10) as drain:
            async for event in drain:
                print(event)  # drain.kill(): the survivors SIGKILLed now, everything removed
        print(drain.summaries)
        # or, without events:
        summary = await deployer.delete("demo")
        # a zero-downtime replacement: the new instance first, ready, then the old one drained
        result = await deployer.replace(new_plan)

The deployer needs asyncio (its engine clients, aiodocker and kubernetes-asyncio, run on aiohttp);
opened under trio it raises :class:`~asyncdeploy._errors.UnsupportedEventLoop`. The server kit,
:mod:`asyncdeploy.workload`, runs on both.
"""

from __future__ import annotations

import builtins
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from anyio.abc import ObjectReceiveStream

from asyncdeploy._errors import EngineTimeout, SelectorError, WorkloadNotFound
from asyncdeploy._event_stream import event_stream
from asyncdeploy._events import DrainSummary, Emit, Event, PullEvent
from asyncdeploy._kill import KillSwitch
from asyncdeploy._log import log_event
from asyncdeploy._operations import CreateEvents, Drain, Replacement, draining
from asyncdeploy._results import (
    ApplyResult,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy._selectors import Selector, SelectorLike, as_selector
from asyncdeploy.drivers.base import Driver, Found
from asyncdeploy.plan import WorkloadPlan, plan_digest
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.replace import _run as _replace
from asyncdeploy.replace._lock import retire_quietly
from asyncdeploy.replace._names import current_name, current_plan, resolving
from asyncdeploy.replace._run import OnEvent, ReplaceOptions, ReplaceResult
from asyncdeploy.replace.events import REPLACE_EVENTS, ReplaceEvent, Strategy

__all__ = [
    "Deployer",
    "ReplaceResult",
]

CLOSE_BOUND = 10.0  # closing the engine clients: their sessions and connectors, no engine call


def _everything_or(selector: SelectorLike | None, *, all: bool) -> Selector | None:
    """The selector a drain of many takes: ``None`` (everything) only when asked by name."""
    if selector is not None and all:
        raise SelectorError("give a selector or all=True, not both")
    if selector is None and not all:
        raise SelectorError(
            "no selector: that would drain every workload; pass all=True to mean it"
        )
    return as_selector(selector)


@attrs.define
class Deployer:
    """One open driver and the operations on it. Get one from :func:`open_deployer`."""

    driver: Driver

    @property
    def driver_name(self) -> str:
        """``docker``, ``podman`` or ``kubernetes``: what this deployer drives."""
        return self.driver.name

    async def create(
        self,
        plan: WorkloadPlan,
        *,
        on_event: Emit | None = None,
        strategy: Strategy = "auto",
        ready_timeout: float = 60,
        on_replace: Callable[[ReplaceEvent], None] | None = None,
    ) -> ApplyResult:
        """Create the workload, as ``kubectl apply`` does: an unchanged plan is a no-op; a
        changed one replaces the workload as :meth:`replace` does, with ``strategy`` (``auto``:
        surge where it fits, else recreate; the ``ReplaceStrategy`` event says which and why
        before anything is touched; a recreate's downtime is a ``ReplaceDowntime``). The same
        plan over a dead workload (every run container ended) is repaired: drained, then made
        again.

        Images are pulled first, as the plan's pull policies say; ``on_event`` sees the pull
        events and the drains' as they happen, ``on_replace`` a replacement's own events; neither
        may block.
        Cancelled, it removes what it had made; a drain of an old workload that has begun is
        never cut short by the cancellation (it runs to its end, then nothing new is created):
        only :meth:`creating`'s ``kill()`` kills its survivors at once.
        """

        def emit(event: Event | ReplaceEvent) -> None:
            if isinstance(event, REPLACE_EVENTS):
                if on_replace is not None:
                    on_replace(event)
                return
            if not isinstance(event, PullEvent):
                log_event(event)  # a replacement's drain steps, as every drain's are logged
            if on_event is not None:
                on_event(event)

        return await self._apply(
            plan, emit, KillSwitch(), strategy=strategy, ready_timeout=ready_timeout
        )

    def creating(
        self,
        plan: WorkloadPlan,
        *,
        strategy: Strategy = "auto",
        ready_timeout: float = 60,
        before_drain: Callable[[], None] | None = None,
    ) -> CreateEvents:
        """Create the workload (as :meth:`create`), with its events: the pulls, the drain of
        what it replaces, and for a changed plan the replacement's own (``ReplaceStrategy``
        first, before anything is touched).

        After the events end, ``creation.result`` is the :class:`ApplyResult`. ``stop()``, or
        a cancellation of the block, cancels the create as :meth:`create` says;
        ``stop(kill=True)`` (``kill()``) cuts the drain of the workload it replaces short. An
        exception in the block (the consumer failed) cancels the create too, except a drain of the old workload: that goes on to its
        end without the consumer; the exception is raised after it. ``before_drain`` (a changed
        plan) is called right before the old one's drain begins: a caller that stops creates on
        a signal switches to a drain's policy there.
        """

        @asynccontextmanager
        async def start(
            kill: KillSwitch,
        ) -> AsyncIterator[ObjectReceiveStream[Event | ReplaceEvent]]:
            async def work(emit: OnEvent) -> None:
                def record(event: Event | ReplaceEvent) -> None:
                    creation._record(event)  # the handle keeps the summaries
                    emit(event)

                with creation._stoppable():
                    result = await self._apply(
                        plan,
                        record,
                        kill,
                        strategy=strategy,
                        ready_timeout=ready_timeout,
                        before_drain=before_drain,
                    )
                    creation._finished(result)

            async with event_stream(work, finish_on_error=False) as stream:
                yield stream

        creation = CreateEvents(start)
        return creation

    async def changes(self, plan: WorkloadPlan) -> bool:
        """Whether ``create`` of ``plan`` replaces a workload of another plan (its current
        instance records another digest): then it runs as a replace."""
        return await self._changed(expand_gates(await current_plan(self.driver, plan)))

    async def _changed(self, planned: WorkloadPlan) -> bool:
        try:
            status = await self.driver.get(planned.name)
        except WorkloadNotFound:
            return False
        return status.plan_digest != plan_digest(planned)

    async def _apply(
        self,
        plan: WorkloadPlan,
        emit: OnEvent,
        kill: KillSwitch,
        *,
        strategy: Strategy,
        ready_timeout: float,
        before_drain: Callable[[], None] | None = None,
    ) -> ApplyResult:
        """The create of :meth:`create` and :meth:`creating`: a changed plan as a replace."""
        planned = expand_gates(await current_plan(self.driver, plan))
        if not await self._changed(planned):
            return await self.driver.apply(planned, emit=emit, kill=kill)
        options = ReplaceOptions(
            ready_timeout=ready_timeout,
            strategy=strategy,
            before_drain=before_drain,
            on_event=emit,
        )
        async with _replace.replacing(self.driver, plan, options, kill) as replaced:
            drained = list(replaced.drained)
            if replaced.drain is not None:
                async for event in replaced.drain:
                    emit(event)
                drained.extend(replaced.drain.summaries)
        return ApplyResult(
            action="replaced",
            status=replaced.new,
            replaced=drained[0] if drained else None,
            strategy=replaced.strategy,
            downtime=replaced.downtime,
        )

    async def get(self, name: str) -> WorkloadStatus:
        """The workload ``name`` means (after a replace: its current instance, ``_names``)."""
        return await resolving(self.driver, name, self.driver.get)

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        """Workloads whose labels match ``selector``: a :class:`~asyncdeploy._selectors.Selector`,
        a Kubernetes selector string (``"team=ml,tier in (gpu)"``) or ``{label: value}``."""
        return await self.driver.list(as_selector(selector))

    async def recent_events(self, name: str, *, limit: int = 10) -> builtins.list[WorkloadEvent]:
        """What the engine recorded about the workload lately (starts, exits, health changes,
        restarts; on Kubernetes the Pod's Events), oldest first."""
        return await resolving(
            self.driver, name, lambda n: self.driver.recent_events(n, limit=limit)
        )

    async def engine_info(self) -> EngineInfo:
        """What answers: the driver, the engine's version and API version (on Kubernetes the
        API server's version); ``EngineUnavailable`` when it no longer does."""
        return await self.driver.ping()

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        """The labels of an image on the engine (None: absent, or not visible to this driver)."""
        return await self.driver.image_labels(image)

    async def build_image(
        self,
        context: bytes,
        tag: str,
        *,
        labels: Mapping[str, str] | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        """Build a tar build context (holding a ``Dockerfile``) as ``tag`` on Docker or Podman,
        its ``RUN`` steps without network; ``on_line`` sees the build's output. The built-in
        images come from :mod:`asyncdeploy.cli.images` (``asyncdeploy images build``)."""
        await self.driver.build_image(context, tag, labels=labels or {}, on_line=on_line)

    async def image_ports(self, image: str) -> frozenset[int] | None:
        """The TCP ports a local image ``EXPOSE``s (None: absent, or not visible to this driver)."""
        return await self.driver.image_ports(image)

    async def wait_ready(
        self, name: str, *, timeout: float = 60, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        """Wait until every run container is ready and return the workload's status: its
        readiness check passes, or, without one, it runs and has kept running with no restart
        ``settle_seconds`` past its start (default 2 s; 0: running is enough). ``CreateError`` at
        once when a container exits or restarts first (its exit code and last log lines in it),
        ``EngineTimeout`` after ``timeout`` seconds."""
        return await resolving(
            self.driver,
            name,
            lambda n: self.driver.wait_ready(n, timeout=timeout, settle_seconds=settle_seconds),
        )

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
        return self._logs(name, container, follow, tail, since, timestamps)

    async def _logs(
        self,
        name: str,
        container: str | None,
        follow: bool,
        tail: int | None,
        since: float | None,
        timestamps: bool,
    ) -> AsyncIterator[str]:
        lines = self.driver.logs(
            await current_name(self.driver, name),
            container=container,
            follow=follow,
            tail=tail,
            since=since,
            timestamps=timestamps,
        )
        try:
            async for line in lines:
                yield line
        finally:
            close = getattr(lines, "aclose", None)
            if close is not None:
                await close()

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
        stdin: AsyncIterable[bytes] | None = None,
        tty: bool = False,
        size: tuple[int, int] | None = None,
    ) -> ExecResult:
        """Run ``command`` in a container (default: the plan's first run container).

        ``on_output`` sees the output as it comes (it must not block). ``stdin``: the bytes of the
        command's standard input (its end is the command's end of file); ``tty``: the command
        runs in a terminal of ``size`` (columns, lines), as ``docker exec -it`` (Docker and
        Podman; on Kubernetes not yet). ``ExecInterrupted`` when
        the container stops before the command ends; ``EngineTimeout`` when it has not ended
        within ``timeout`` seconds (the engines cannot stop an exec: the command may still
        run in the container).
        """
        try:
            with anyio.fail_after(timeout):
                return await resolving(
                    self.driver,
                    name,
                    lambda n: self.driver.exec(
                        n,
                        command,
                        container=container,
                        on_output=on_output,
                        stdin=stdin,
                        tty=tty,
                        size=size,
                    ),
                )
        except TimeoutError:
            raise EngineTimeout(
                f"exec in {name}: the command did not end within {timeout:g} s (it may still "
                "be running in the container)",
                engine=self.driver_name,
            ) from None

    async def inspect(self, name: str) -> dict[str, Any]:
        """The engine's own description of the workload (containers or Pod), secret-looking
        values masked."""
        return await resolving(self.driver, name, self.driver.inspect)

    def terminate(self, name: str, *, grace_period_seconds: int | None = None) -> Drain:
        """Drain one workload: the handle of its drain (:class:`~asyncdeploy.Drain`), whose
        events come as they happen.

        Leaving the block early lets the drain finish, and so does an exception in the block (a
        consumer that fails, say on a closed pipe, never turns the drain into a kill): the drain
        goes on to its end without it, its events dropped, and the exception is raised after
        it. A cancellation of the block cancels the drain, and the driver's shielded cleanup
        still kills and removes everything (the events of that cleanup are then not delivered:
        the block is gone). ``drain.kill()`` cuts the drain short instead while the events keep
        flowing: survivors are SIGKILLed at once, everything is removed, and ``DrainFinished``
        still arrives; called before the drain begins (also while it follows another delete's),
        the drain runs at grace 0. The block then raises as after a full drain: ``DrainError``
        when something could not be removed, ``DrainUnreachable`` when the engine went away.
        Raises ``DrainError`` on exit when some step failed (read from the ``DrainFinished``
        events, so a drain cut short reports what it left), and ``WorkloadNotFound`` on entry,
        before any event, when there is no such workload (the driver's one look, which the
        drain starts from).
        """
        driver = self.driver
        return draining(
            driver,
            lambda: resolving(driver, name, lambda n: driver.find([n])),
            grace_period_seconds,
            then=self._retire_locks,
        )

    def terminate_many(
        self,
        names: Sequence[str],
        *,
        grace_period_seconds: int | None = None,
        ignore_not_found: bool = False,
    ) -> Drain:
        """Drain the named workloads concurrently under one deadline, as :meth:`terminate`
        drains one (a plan's name finds its current instance). ``WorkloadNotFound`` naming every
        missing one on entry, before any event, unless ``ignore_not_found``: then they are left
        out (none left: no event)."""
        driver = self.driver

        async def look() -> Found:
            present: builtins.list[str] = []
            missing: builtins.list[str] = []
            for name in dict.fromkeys(names):
                try:
                    present.append(await current_name(driver, name))
                except WorkloadNotFound:
                    missing.append(name)
            if missing and not ignore_not_found:
                raise WorkloadNotFound(
                    f"no workload named {', '.join(map(repr, missing))}",
                    engine=driver.name,
                )
            return await driver.find(present)

        return draining(driver, look, grace_period_seconds, then=self._retire_locks)

    def terminate_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
        all: bool = False,
    ) -> Drain:
        """Drain every workload ``selector`` matches concurrently under one deadline
        (``kill()``: as for :meth:`terminate`), from one look at them all; none matching yields
        no event. Every workload asyncdeploy manages only with ``all=True`` and no selector, as
        the CLI's ``delete-all --all``: no selector alone is refused. An invalid selector, or
        no selector without ``all``, raises ``SelectorError`` before any call."""
        chosen = _everything_or(selector, all=all)
        return draining(
            self.driver,
            lambda: self.driver.find_matching(chosen),
            grace_period_seconds,
            then=self._retire_locks,
        )

    async def _retire_locks(self, found: Found) -> None:
        """After a delete: a plan whose last instance is gone leaves no replace lock behind."""
        await retire_quietly(self.driver, found.names)

    async def delete(self, name: str, *, grace_period_seconds: int | None = None) -> DrainSummary:
        """Drain and remove one workload; return its summary."""
        async with self.terminate(name, grace_period_seconds=grace_period_seconds) as drain:
            async for _ in drain:
                pass
        return drain.summaries[0]

    async def delete_all(
        self,
        selector: SelectorLike | None = None,
        *,
        grace_period_seconds: int | None = None,
        all: bool = False,
    ) -> builtins.list[DrainSummary]:
        """Drain and remove every matching workload; none matching is not an error. Every
        workload only with ``all=True`` (and no selector): ``delete_all()`` alone is refused
        (``SelectorError``), as ``delete-all`` without ``--selector`` or ``--all`` is."""
        async with self.terminate_all(
            selector, grace_period_seconds=grace_period_seconds, all=all
        ) as drain:
            async for _ in drain:
                pass
        return builtins.list(drain.summaries)

    async def replace(
        self,
        plan: WorkloadPlan,
        *,
        old: Sequence[str] | None = None,
        new_name: str | None = None,
        ready_timeout: float = 60,
        grace_period_seconds: int | None = None,
        on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None,
        strategy: Strategy = "auto",
        on_event: OnEvent | None = None,
    ) -> ReplaceResult:
        """Replace a workload (by default without downtime when it fits); see :meth:`replacing`."""
        async with self.replacing(
            plan,
            old=old,
            new_name=new_name,
            ready_timeout=ready_timeout,
            grace_period_seconds=grace_period_seconds,
            on_ready=on_ready,
            strategy=strategy,
            on_event=on_event,
        ) as replacement:
            async for _ in replacement:
                pass
        return ReplaceResult(
            new=replacement.new,
            drained=replacement.drained + replacement.summaries,
            strategy=replacement.strategy,
            downtime=replacement.downtime,
        )

    def replacing(
        self,
        plan: WorkloadPlan,
        *,
        old: Sequence[str] | None = None,
        new_name: str | None = None,
        ready_timeout: float = 60,
        grace_period_seconds: int | None = None,
        on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None,
        strategy: Strategy = "auto",
        before_drain: Callable[[], None] | None = None,
        on_event: OnEvent | None = None,
    ) -> Replacement:
        """Start ``plan`` as a new instance and drain the old ones: ``surge`` (the new one
        ready first), ``recreate`` (the old ones drained first) or ``auto`` (surge when it
        fits); see :func:`asyncdeploy.replace._run.replacing`. Cancelled before the old ones' drain
        began, it removes the new instance and leaves the old ones serving; ``kill()`` on the
        handle cuts a drain short (the old ones', or a roll-back's), from before it is entered
        on."""
        options = ReplaceOptions(
            old=old,
            new_name=new_name,
            ready_timeout=ready_timeout,
            grace_period_seconds=grace_period_seconds,
            on_ready=on_ready,
            strategy=strategy,
            before_drain=before_drain,
            on_event=on_event,
        )
        return Replacement(lambda kill: _replace.replacing(self.driver, plan, options, kill))

    async def aclose(self) -> None:
        """Close the engine client (``open_deployer`` does it when its block ends). Shielded:
        called from a cancelled task (a caller's own ``finally``), an unshielded close gives up
        at its first await and leaves the client's connections open."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BOUND):
            await self.driver.aclose()
