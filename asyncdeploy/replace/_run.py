"""Replacing a workload: the strategies, the roll-back, and where a replacement may be stopped.

:meth:`Deployer.replacing <asyncdeploy.deployer.Deployer.replacing>` is the public door; the
flow lives here so that the deployer stays the small awaitable API.

- ``surge``: the new instance is started and waited for; once it is ready the old ones are
  drained. Two instances run at once, so it needs everything twice (host ports, accelerators).
- ``recreate``: the old ones are drained first, then the new one is started; no instance serves
  in between, and that downtime is reported (``ReplaceDowntime``, ``ReplaceResult.downtime``):
  from the old ones' stop (they serve while they drain) to the new one's readiness.
  When the new one fails, the old ones are created again from the plans they recorded
  (``LABEL_PLAN``) and waited for: ``ReplaceFailed`` says what serves then, or that nothing does.
- ``auto`` (the default): surge when it fits, else recreate. On Docker and Podman a plan that
  publishes a fixed host port cannot surge (one host cannot bind the port twice); on Kubernetes
  the new Pod is tried, and one the scheduler cannot place beside the old one (``Unschedulable``:
  ``Insufficient nvidia.com/gpu``, no free host port) within :data:`SCHEDULE_BOUND` is removed
  and the replacement recreates.

Where it can be stopped (a cancellation): until the old instances' drain begins, a cancellation
removes the new instance (by a drain when it had been created and started) and leaves the old
ones serving. From then on it is a drain like any other: the operation's kill switch cuts it
short (``Replacement.kill()``).

The plan's named volumes (and on Kubernetes its Service) are never removed on the way: a drain
while another instance of the plan mounts them (surge) leaves them to it (the engine refuses to
remove a volume in use; a Service goes only when no Pod is behind it), and every other drain here
(recreate's, a roll-back's when the plan has other instances) keeps them; the delete of the
plan's last instance removes them.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Literal, cast

import anyio
import anyio.lowlevel
import attrs

from asyncdeploy._errors import (
    AsyncDeployError,
    CreateError,
    OperationTimeout,
    ReplaceFailed,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._event_stream import workload_exists
from asyncdeploy._events import DrainEvent, DrainSummary, Emit, PullEvent
from asyncdeploy._kill import KillSwitch
from asyncdeploy._operations import Drain, draining
from asyncdeploy._results import WorkloadStatus
from asyncdeploy.drivers.base import Driver, Found
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.replace._lock import replace_lock
from asyncdeploy.replace._strategy import (
    SCHEDULE_BOUND,
    choose,
    fixed_host_ports,
    held_host_ports,
)
from asyncdeploy.replace.events import (
    ReplaceDowntime,
    ReplaceEvent,
    ReplaceReady,
    ReplaceRestored,
    ReplaceRolledBack,
    ReplaceStrategy,
    ReplaceWaiting,
    Strategy,
)

__all__ = [
    "OnEvent",
    "ReplaceOptions",
    "ReplaceResult",
    "Replaced",
    "replacing",
]

WAITING_EVERY = 2.0  # how often a ReplaceWaiting is reported
ROLL_BACK_MARGIN = 60.0
LOCK_MARGIN = 600.0  # past the longest a replacement can take: its lock is stale after it  # past the new instance's grace: the bound on its roll-back
_CANNOT_FIT = ("Unschedulable", "Insufficient", "free ports")
_BIND_FAILED = ("port is already allocated", "address already in use")

OnEvent = Callable[[ReplaceEvent | DrainEvent | PullEvent], None]


@attrs.frozen(kw_only=True)
class Replaced:
    """Where a replacement stands once entered: the new instance (ready), the old ones' drain
    (its own handle, with its events, summaries and verdict; the public handle,
    :class:`asyncdeploy.Replacement`, holds this).

    With ``recreate`` the old ones were drained before the new one started: ``drain`` is then
    None, ``drained`` holds their summaries and ``downtime`` the seconds without an instance.
    """

    new: WorkloadStatus
    old: tuple[str, ...]
    drain: Drain | None
    strategy: Literal["surge", "recreate"] = "surge"
    drained: tuple[DrainSummary, ...] = ()
    downtime: float | None = None


@attrs.frozen(kw_only=True)
class ReplaceResult:
    """A finished replacement: the new instance and one drain summary per old instance."""

    new: WorkloadStatus
    drained: tuple[DrainSummary, ...]
    strategy: Literal["surge", "recreate"] = "surge"
    downtime: float | None = None  # recreate: seconds from the old ones' stop to the new ready


def _draining(
    driver: Driver,
    found: Found,
    grace_period_seconds: int | None,
    kill: KillSwitch,
    *,
    keep_volumes: bool = False,
) -> Drain:
    """A drain of what ``found`` holds, as a handle of its own (its events, its summaries, its
    verdict on exit) cut short by the replacement's kill switch."""

    async def look() -> Found:
        return found

    return draining(driver, look, grace_period_seconds, keep_volumes=keep_volumes, switch=kill)


def _ignore(_: object) -> None:
    pass


@attrs.frozen(kw_only=True)
class ReplaceOptions:
    """How one replacement goes: what :meth:`Deployer.replacing` was given, as one value.

    ``old``: the instances to drain (default: the workload named ``plan.name`` and every earlier
    instance of it); ``new_name``: the new instance's (default ``<plan.name>-<6 hex>``);
    ``on_ready`` is awaited once the new one is ready, before any drain; ``before_drain`` is
    called right before the old ones' drain begins;
    ``on_event`` sees the replace events (and the drain events of a roll-back and of a
    ``recreate``'s drain), and must not block.
    """

    old: Sequence[str] | None = None
    new_name: str | None = None
    ready_timeout: float = 60
    grace_period_seconds: int | None = None
    on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None
    strategy: Strategy = "auto"
    before_drain: Callable[[], None] | None = None
    on_event: OnEvent | None = None


@asynccontextmanager
async def replacing(
    driver: Driver, plan: WorkloadPlan, options: ReplaceOptions, kill: KillSwitch
) -> AsyncIterator[Replaced]:
    """Replace the workload ``plan`` names by a new instance of it (see the module docstring).

    The new instance is named ``new_name`` (default ``<plan.name>-<6 hex>``) and labelled
    ``replace.asyncdeploy.io/instance-of=<plan.name>``. The old ones are ``old``, or by default the
    workload named ``plan.name`` and every earlier instance of it. A load balancer follows
    readiness: it adds the new instance once its readiness check passes (``on_ready`` is
    awaited then, before any drain: register it there if your balancer is told, not polled),
    and the old one leaves rotation when its drain fails its readiness check, before its
    listener closes. If the new instance never becomes ready it is removed and the old
    ones are left untouched (with ``surge``).

    ``before_drain`` is called (synchronously) right before the old instances' drain begins: a
    caller that stops replacements on a signal switches to a drain's policy there.
    ``on_event`` sees the replace events, and the drain events of a roll-back and of a
    ``recreate``'s drain of the old ones; it must not block.
    """
    emit: OnEvent = options.on_event or _ignore
    new_name = options.new_name or f"{plan.name[:56]}-{secrets.token_hex(3)}"
    if await workload_exists(driver, new_name):
        raise WorkloadConflict(
            f"cannot start the replacement as {new_name!r}: a workload has that name",
            engine=driver.name,
        )
    grace = max(plan.termination_grace_period_seconds, options.grace_period_seconds or 0)
    bound = options.ready_timeout + 2 * grace + LOCK_MARGIN
    lock = replace_lock(driver, plan.name, bound=bound, labels=dict(plan.labels))
    deadline = _Deadline(anyio.current_time() + bound, f"replace of {plan.name}", bound)
    async with (
        lock,
        _replacing_locked(driver, plan, options, new_name, emit, kill, deadline) as replacement,
    ):
        yield replacement


@attrs.frozen
class _Deadline:
    """The replace's own deadline: its lock's bound (past it the lock is stale, and another
    replace may take over). Every wait before the old ones' drain is held to it."""

    at: float
    what: str
    seconds: float

    @contextmanager
    def held(self) -> Iterator[None]:
        """Its steps, cancelled at the deadline (and cleaned as on any cancellation); only
        that cancellation becomes ``OperationTimeout`` (a step's own timeout stays itself)."""
        with anyio.CancelScope(deadline=self.at) as scope:
            yield
        if scope.cancelled_caught:
            raise OperationTimeout(
                f"the {self.what} did not finish within {self.seconds:g} s, its lock's bound "
                "(what it had started was removed again)"
            )


@asynccontextmanager
async def _replacing_locked(
    driver: Driver,
    plan: WorkloadPlan,
    options: ReplaceOptions,
    new_name: str,
    emit: OnEvent,
    kill: KillSwitch,
    deadline: _Deadline,
) -> AsyncIterator[Replaced]:
    with deadline.held():
        run, old, status = await _start(driver, plan, options, new_name, emit, kill)
        found = None
        if status is not None:  # surge: the new one is ready; the old ones are drained after
            found = await run.old_found(old, options.before_drain)
    if found is not None:
        assert status is not None
        # (the plan's volumes and Service stay: the new instance mounts and is behind them)
        drain = _draining(driver, found, options.grace_period_seconds, kill)
        async with drain:  # bounded by each driver (the grace, then a kill)
            yield Replaced(new=status, old=old, drain=drain)
        return
    with deadline.held():
        status, drained, downtime = await _recreate(driver, plan, options, run, old, emit)
    yield Replaced(
        new=status,
        old=old,
        drain=None,
        strategy="recreate",
        drained=tuple(drained),
        downtime=downtime,
    )


async def _start(
    driver: Driver,
    plan: WorkloadPlan,
    options: ReplaceOptions,
    new_name: str,
    emit: OnEvent,
    kill: KillSwitch,
) -> tuple[_Run, tuple[str, ...], WorkloadStatus | None]:
    """The strategy chosen (and said) and its run; with surge the new instance started and
    ready (None: recreate, chosen or because the scheduler cannot place it beside the old)."""
    on_ready, strategy = options.on_ready, options.strategy
    old = options.old
    if old is None:
        instances = await driver.list({LABEL_INSTANCE_OF: plan.name})
        named = [plan.name] if await workload_exists(driver, plan.name) else []
        old = [*named, *(w.name for w in instances if w.name != plan.name)]
    else:
        await driver.find(old)  # a clear WorkloadNotFound before anything starts
    old = tuple(old)
    of = plan.instance_of or plan.name  # an instance's successor: an instance of the same plan
    new_plan = expand_gates(attrs.evolve(plan, name=new_name, instance_of=of))
    held = await held_host_ports(driver, old) if driver.name != "kubernetes" else set()
    chosen, reason = choose(strategy, plan, old, driver.name, held)
    emit(ReplaceStrategy(workload=plan.name, strategy=chosen, reason=reason, new=new_name, old=old))
    run = _Run(driver, new_plan, options.ready_timeout, kill, emit, keep_volumes=bool(old))
    if chosen == "surge":
        bound = SCHEDULE_BOUND if strategy == "auto" and driver.name == "kubernetes" else None
        status = await run.start_new(on_ready, cannot_fit_within=bound)
        if status is not None:
            return run, old, status
        chosen = "recreate"  # auto on Kubernetes: the scheduler cannot place both
        emit(
            ReplaceStrategy(
                workload=plan.name,
                strategy=chosen,
                reason=f"the new Pod cannot be scheduled beside the old one ({run.cannot_fit})",
                new=new_name,
                old=old,
            )
        )
    return run, old, None


async def _recreate(
    driver: Driver,
    plan: WorkloadPlan,
    options: ReplaceOptions,
    run: _Run,
    old: tuple[str, ...],
    emit: OnEvent,
) -> tuple[WorkloadStatus, list[DrainSummary], float]:
    """The old ones drained first, then the new one started: its status, the old ones'
    summaries and the seconds without an instance."""
    # the images first: a pull that fails leaves the old instances serving
    await driver.pull(run.plan, emit=cast(Emit, emit))
    recorded = await _recorded_plans(driver, old)  # what a failed recreate brings back
    found = await run.old_found(old, options.before_drain)
    started = anyio.current_time()
    drained = await run.drain_forwarding(found, options.grace_period_seconds)
    run.old_drained = True
    try:
        status = await run.start_new(options.on_ready, cannot_fit_within=None)
    except Exception as failure:
        raise await run.restore(plan.name, recorded, failure, started) from failure
    assert status is not None
    stopped = stopped_after(drained) if old else 0.0
    downtime = max(0.0, anyio.current_time() - started - stopped) if old else 0.0
    emit(ReplaceDowntime(workload=plan.name, seconds=downtime, drain_seconds=stopped))
    return status, drained, downtime


def stopped_after(drained: Sequence[DrainSummary]) -> float:
    """Seconds from the old instances' drain start until the last of them stopped serving:
    each stops with its first run or sidecar container to end (its server, or the gate in
    front of it); one whose ends were not timed stops at its drain's end."""
    stops = []
    for summary in drained:
        ends = [
            c.seconds
            for c in summary.containers
            if c.role in ("run", "sidecar") and c.seconds is not None
        ]
        stops.append(min(ends) if ends else summary.seconds)
    return max(stops, default=0.0)


async def _recorded_plans(
    driver: Driver, old: Sequence[str]
) -> list[tuple[str, WorkloadPlan | None]]:
    """Each old instance and the plan it recorded (None: none, or it went meanwhile)."""
    found: list[tuple[str, WorkloadPlan | None]] = []
    for name in old:
        try:
            found.append((name, await driver.recorded_plan(name)))
        except WorkloadNotFound:
            found.append((name, None))
    return found


@attrs.define
class _Run:
    """One replacement's steps on the new instance, and the drain of the old ones."""

    driver: Driver
    plan: WorkloadPlan  # the new instance's
    ready_timeout: float
    kill: KillSwitch
    emit: OnEvent
    keep_volumes: bool = False  # the plan has other instances: its volumes are theirs too
    old_drained: bool = False  # a recreate, past the old instances' drain
    cannot_fit: str = ""

    async def start_new(
        self,
        on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None,
        *,
        cannot_fit_within: float | None,
    ) -> WorkloadStatus | None:
        """Create the new instance and wait until it is ready, reporting progress; on failure
        or cancellation remove it again and re-raise. None: it did not fit (``cannot_fit``)."""
        driver, name = self.driver, self.plan.name
        try:
            await driver.apply(self.plan, emit=self.emit)  # cancelled, it removes what it made
        except CreateError as exc:
            ports = ", ".join(fixed_host_ports(self.plan))
            if ports and any(words in str(exc) for words in _BIND_FAILED):
                raise CreateError(
                    f"the new instance {name} cannot bind host port {ports}: something else on "
                    f"this host holds it (it was removed again; the engine said: {exc})"
                ) from exc
            raise
        started = anyio.current_time()
        try:
            failure: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._report_waiting, started)
                try:
                    status = await driver.wait_ready(name, timeout=self.ready_timeout)
                except Exception as exc:  # noqa: BLE001 - raised below, outside the group
                    failure = exc  # (so that no ExceptionGroup wraps it)
                finally:
                    tg.cancel_scope.cancel()
            if failure is not None:
                seconds = anyio.current_time() - started
                if (
                    isinstance(failure, CreateError)
                    and cannot_fit_within is not None
                    and seconds < cannot_fit_within
                    and any(word in str(failure) for word in _CANNOT_FIT)
                ):
                    self.cannot_fit = str(failure)
                    await self._roll_back(drain=False, reason="it cannot be scheduled")
                    return None
                raise failure
            self.emit(ReplaceReady(workload=name, seconds=anyio.current_time() - started))
            if on_ready is not None:
                await on_ready(status)
        except anyio.get_cancelled_exc_class():
            await self._roll_back(drain=True, reason="the replacement was interrupted")
            raise
        except BaseException as exc:
            await self._roll_back(drain=False, reason=f"it did not become ready: {exc}")
            raise
        return status

    async def old_found(self, old: Sequence[str], before_drain: Callable[[], None] | None) -> Found:
        """The old instances, looked at afresh; the last point where a cancellation leaves them
        untouched (and removes a started new instance)."""
        try:
            found = await self.driver.find(old)
            if before_drain is not None:
                before_drain()  # no checkpoint from here until their drain has begun
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            if await workload_exists(self.driver, self.plan.name):
                await self._roll_back(drain=True, reason="the replacement was interrupted")
            raise
        return found

    async def drain_forwarding(
        self, found: Found, grace_period_seconds: int | None
    ) -> list[DrainSummary]:
        """Drain the old instances before the new one exists (recreate), their events handed
        to ``emit``; a failed drain raises and nothing is created."""
        drain = _draining(self.driver, found, grace_period_seconds, self.kill, keep_volumes=True)
        async with drain:
            async for event in drain:
                self.emit(event)
        return list(drain.summaries)

    async def _report_waiting(self, started: float) -> None:
        driver, name = self.driver, self.plan.name
        while True:
            await anyio.sleep(WAITING_EVERY)
            try:
                status = await driver.get(name)
            except AsyncDeployError:
                continue
            states = tuple(
                f"{c.name}: {c.state}" + (f", {c.health}" if c.health else "")
                for c in status.containers
                if c.role == "run"
            )
            seconds = anyio.current_time() - started
            self.emit(ReplaceWaiting(workload=name, seconds=seconds, containers=states))

    async def _roll_back(self, *, drain: bool, reason: str) -> None:
        """Remove the new instance, shielded and bounded: with a drain when it may have served
        (the kill switch cuts that short), else at once. The plan's named volumes stay when it
        has other instances (or had: a recreate's). Its errors are reported, never raised: why
        the replacement failed is the news."""
        name = self.plan.name
        grace = self.plan.termination_grace_period_seconds if drain else 0
        with anyio.CancelScope(shield=True), anyio.move_on_after(grace + ROLL_BACK_MARGIN):
            try:
                found = await self.driver.find([name])
                async with _draining(
                    self.driver, found, grace, self.kill, keep_volumes=self.keep_volumes
                ) as drained:
                    async for event in drained:
                        self.emit(event)
            except AsyncDeployError:
                pass  # its DrainFinished (errors included) was emitted; gone already is fine
            old: Literal["serving", "drained"] = "drained" if self.old_drained else "serving"
            self.emit(ReplaceRolledBack(workload=name, reason=reason, old=old))

    async def restore(
        self,
        plan_name: str,
        recorded: Sequence[tuple[str, WorkloadPlan | None]],
        failure: Exception,
        started: float,
    ) -> ReplaceFailed:
        """After a recreate's new instance failed (and was removed): create the old instances
        again from the plans they recorded and wait until they are ready. The error to raise
        says what serves now; a :class:`ReplaceRestored` when they all do."""
        why = f"the new instance {self.plan.name} failed: {_first_line(failure)}"
        if not recorded:
            return ReplaceFailed(f"{why}; there was no earlier instance to bring back")
        unknown = [name for name, plan in recorded if plan is None]
        problems = [f"{name} recorded no plan (made by an older asyncdeploy)" for name in unknown]
        serving: list[str] = []
        for name, plan in recorded:
            if plan is None:
                continue
            try:
                await self.driver.apply(plan, emit=self.emit)
                await self.driver.wait_ready(name, timeout=self.ready_timeout)
            except AsyncDeployError as exc:
                problems.append(f"{name}: {_first_line(exc)}")
            else:
                serving.append(name)
        if not serving:
            return ReplaceFailed(
                f"nothing of {plan_name!r} serves now: {why}, and the previous plan could not "
                f"be brought back ({'; '.join(problems)}). Its named volumes were kept: fix the "
                "plan, then create it again (asyncdeploy create -f PLAN_FILE)"
            )
        if problems:
            return ReplaceFailed(
                f"{why}; of the previous plan only {', '.join(serving)} serves again "
                f"({'; '.join(problems)})",
                serving=serving,
            )
        seconds = anyio.current_time() - started
        self.emit(ReplaceRestored(workload=plan_name, instances=tuple(serving), seconds=seconds))
        return ReplaceFailed(
            f"{why}; the previous plan serves again as {', '.join(serving)} "
            f"({seconds:.1f} s without an instance)",
            serving=serving,
        )


def _first_line(error: BaseException) -> str:
    """An error's first line (a CreateError may carry the container's logs after it)."""
    return str(error).partition("\n")[0]
