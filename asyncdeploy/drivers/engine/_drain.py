"""The drain of container-engine workloads: one deadline, one pipeline per container, the events.

For each workload:

1. remove the autoheal sidecar (so it cannot resurrect a container being drained) and, at the
   same time, claim the drain: pause the pause container. A delete that finds it already paused
   follows the other delete instead (:meth:`_WorkloadDrain.follow`): it never signals, never
   shortens the other's drain, and takes over only when the workload is still there well past
   the deadline, or sits there with nothing running and nothing changing (its deleter died);
2. run one pipeline per init and run container, all under the one deadline: its ``pre_stop``
   hook (a hook that fails goes straight on), its stop signal, the wait for its exit. One hung
   hook delays no other container's signal;
3. at the deadline, SIGKILL whatever still runs (grace 0: at once, with the pause container, and
   no hooks and no TERM), and remove each container as soon as its end is seen;
4. remove the pause container last (it holds the namespaces the others share: removing it
   first SIGKILLs them on Docker and is refused by Podman), then the volumes.

Exits come from one engine event stream per :func:`drain_workloads`, opened before the first
signal (:mod:`._exits`): Podman's ``wait`` answers only after its cleanup (0.4-1.6 s after the
``die`` event, measured) and holds one of its few API workers meanwhile. The engine's ``wait``
is the fallback for a stream cut or never opened, and for a container found not running.

An engine call lost with the connection (``EngineUnavailable``) is retried with backoff, the
wait re-armed, until the deadline: a connection that blinks kills nothing. An engine still
unreachable ``GIVE_UP_AFTER`` past the deadline ends the drain: the containers whose end was
not seen are ``unreachable`` and the call raises ``DrainUnreachable`` (the CLI's exit 3).

Steps 3 and 4 run shielded and bounded, so they complete even when the caller cancels, and
``DrainFinished`` with the summary is emitted in every case. Another failing step is written in
the summary and the drain goes on; the caller gets a ``DrainError`` once everything that could
be cleaned was cleaned.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import attrs
from anyio.abc import TaskGroup

from asyncdeploy.drivers._books import DrainBooks, TrackedContainer, effective_grace
from asyncdeploy.drivers.engine._exits import ExitStreamLost, ExitWatch, first_exit
from asyncdeploy.drivers.engine._ops import (
    ContainerLook,
    ContainerOps,
    ContainerRef,
    WorkloadSnapshot,
)
from asyncdeploy.errors import DrainUnreachable, EngineError, EngineUnavailable, WorkloadNotFound
from asyncdeploy.events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainStarted,
    DrainSummary,
    Emit,
    Outcome,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
)

__all__ = [
    "CLEANUP_TIMEOUT",
    "ContainerLook",
    "ContainerOps",
    "ContainerRef",
    "WorkloadSnapshot",
    "drain_workloads",
]

CLEANUP_TIMEOUT = 60.0  # bound on the shielded kill-and-remove part
KILL_WAIT = 10.0  # how long a SIGKILLed container may take to be reported gone
RETRY_FIRST, RETRY_MAX = 0.05, 1.0  # backoff between tries of a call lost with the connection
GIVE_UP_AFTER = 5.0  # past the deadline: how long the engine may stay unreachable
FOLLOW_MARGIN = 10.0  # past its deadline: how long a follower waits before it takes over
FOLLOW_POLL_MAX = 0.5
STALE_AFTER = 2.0  # nothing running and nothing changing this long: nobody else drains it
SIGKILLED = 137
_DRAINED = ("init", "run", "sidecar")  # the roles whose containers get a pipeline

T = TypeVar("T")


@attrs.define(kw_only=True)
class _Tracked(TrackedContainer):
    ref: ContainerRef


@attrs.define(kw_only=True)
class _WorkloadDrain:
    """One workload's drain; every engine error becomes a line in ``books.errors``."""

    ops: ContainerOps
    snapshot: WorkloadSnapshot
    books: DrainBooks
    exits: ExitWatch  # the drain's one exit stream, shared by every workload
    tracked: list[_Tracked] = attrs.field(factory=list)
    owner: bool = True  # False while following another delete: nothing to kill or remove
    pause_killed: set[str] = attrs.field(factory=set)
    gone: set[str] = attrs.field(factory=set)  # ids of containers seen removed
    cleaning: bool = False
    unreachable_since: float | None = None
    lost: bool = False  # the engine stayed unreachable: the drain gave up on it

    @property
    def name(self) -> str:
        return self.snapshot.name

    async def run(self) -> DrainSummary:
        books, refs = self.books, self.snapshot.containers
        self.tracked = [
            _Tracked(name=r.name, role=r.role, ref=r) for r in refs if r.role in _DRAINED
        ]
        for t in self.tracked:
            if not t.ref.running:
                t.outcome, t.exit_code = "already-exited", t.ref.exit_code
        books.emit(
            DrainStarted(
                **books.at(),
                grace_period_seconds=books.grace,
                deadline=time.time() + (books.deadline - books.clock()),
                containers=tuple(r.name for r in refs),
            )
        )
        try:
            async with anyio.create_task_group() as tg:
                for sidecar in (r for r in refs if r.role == "autoheal"):
                    tg.start_soon(self._remove_sidecar, sidecar)
                self.owner = not await self._drained_elsewhere()
            if not self.owner:
                self.owner = await self.follow()
            elif books.grace > 0:
                with anyio.move_on_at(books.deadline):
                    # Sidecars (a proxy, the drain gate) are signalled once the others exited.
                    for roles in (("init", "run"), ("sidecar",)):
                        async with anyio.create_task_group() as tg:
                            for t in self.tracked:
                                if t.outcome is None and t.role in roles:
                                    tg.start_soon(self._pipeline, t)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT) as scope:
                self.cleaning = True
                if self.owner:
                    await self._end_all()
            if scope.cancelled_caught:
                books.error(f"cleanup did not finish within {CLEANUP_TIMEOUT:.0f} s")
            summary = books.finish(self.tracked, unknown="unreachable" if self.lost else "missing")
        return summary

    # --- engine calls: retried while the connection is lost ----------------------------------

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, tried again with backoff while the engine is unreachable, until it has
        been unreachable for GIVE_UP_AFTER past the deadline (or, cancelled, in the cleanup)."""
        pause = RETRY_FIRST
        while True:
            try:
                result = await call()
            except EngineUnavailable:
                now = self.books.clock()
                if self.unreachable_since is None:
                    self.unreachable_since = now
                deadline = self.books.deadline
                if now >= deadline or self.cleaning:  # a cancelled drain cleans up early
                    since = self.unreachable_since
                    if now - (max(since, deadline) if now >= deadline else since) >= GIVE_UP_AFTER:
                        raise
                await anyio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
            else:
                self.unreachable_since = None
                return result

    def _failed(self, what: str, exc: EngineError) -> None:
        if isinstance(exc, EngineUnavailable):
            if not self.lost:
                self.lost = True
                self.books.error(
                    f"engine unreachable for {GIVE_UP_AFTER:g} s past the deadline "
                    f"({exc.message}); delete again once it answers"
                )
        else:
            self.books.error(f"{what}: {exc}")

    # --- one delete at a time ----------------------------------------------------------------

    def _pause(self) -> ContainerRef | None:
        return next((r for r in self.snapshot.containers if r.role == "pause"), None)

    async def _drained_elsewhere(self) -> bool:
        """Claim the drain; True when another delete holds the claim (it pauses the pause)."""
        pause = self._pause()
        if pause is None or self.books.grace == 0 or not pause.running:
            return False  # grace 0 kills at once: there is no drain to shorten
        if pause.paused:
            return True
        try:
            if await self._call(lambda: self.ops.claim(pause)):
                return False
            look = await self._call(lambda: self.ops.look(pause))
        except EngineUnavailable as exc:
            self._failed(f"claim the drain of {self.name}", exc)
            return False
        except EngineError:
            # Gone, or an engine that cannot pause (no cgroup freezer): drain unclaimed; only a
            # concurrent delete loses its protection, this one must not fail for it.
            return False
        return look is not None and look.paused

    async def follow(self) -> bool:
        """Follow another delete's drain, reading exits and removals as they happen, until the
        workload is gone: False. True when this delete must take over (see the module doc)."""
        books = self.books
        declared = self.snapshot.grace_period_seconds
        give_up = books.started + max(books.grace, declared) + FOLLOW_MARGIN
        quiet_since, pause = books.clock(), RETRY_FIRST
        with anyio.move_on_at(give_up):
            while True:
                try:
                    changed = await self._look_all()
                except EngineError as exc:
                    self._failed(f"follow {self.name}", exc)
                    return False
                if all(r.id in self.gone for r in self.snapshot.containers):
                    return False
                running = any(t.outcome is None for t in self.tracked)
                if changed:
                    quiet_since = books.clock()
                elif not running and books.clock() - quiet_since >= STALE_AFTER:
                    return True
                await anyio.sleep(pause)
                pause = min(pause * 2, FOLLOW_POLL_MAX)
        return True

    async def _look_all(self) -> bool:
        """One look at every container not yet seen gone; True when something changed."""
        changed = False
        for ref in self.snapshot.containers:
            if ref.id in self.gone:
                continue
            look = await self._call(lambda ref=ref: self.ops.look(ref))  # type: ignore[misc]
            tracked = self._tracked(ref)
            if look is None:
                changed = True
                self.gone.add(ref.id)
                if ref.role != "autoheal":
                    self._removed(ref)
            elif tracked is not None and tracked.outcome is None and not look.running:
                changed = True
                self._exited(
                    tracked, look.exit_code, "killed" if look.exit_code == SIGKILLED else "exited"
                )
        return changed

    def _tracked(self, ref: ContainerRef) -> _Tracked | None:
        return next((t for t in self.tracked if t.ref is ref), None)

    # --- the pipelines -----------------------------------------------------------------------

    async def _remove_sidecar(self, ref: ContainerRef) -> None:
        try:
            if ref.running:
                await self._call(lambda: self.ops.signal(ref, "SIGKILL"))  # nothing to drain
            await self._call(lambda: self.ops.remove(ref))
        except WorkloadNotFound:
            pass
        except EngineError as exc:
            self._failed(f"remove {ref.name}", exc)
            return
        self.gone.add(ref.id)
        self.books.emit(SidecarRemoved(**self.books.at(), container=ref.name))

    async def _pipeline(self, t: _Tracked) -> None:
        """One container's way out: its hook, then its signal, then its exit."""
        if t.ref.pre_stop or t.ref.pre_stop_http:
            await self._pre_stop(t)
        await self._stop_one(t)

    async def _pre_stop(self, t: _Tracked) -> None:
        ref = t.ref
        self.books.emit(PreStopStarted(**self.books.at(t)))
        exit_code: int | None = None
        failed = False
        try:
            pause = self._pause()
            if ref.pre_stop_http is not None and pause is not None:
                exit_code = await self.ops.run_http_hook(pause, *ref.pre_stop_http)
            elif ref.pre_stop:
                exit_code = await self.ops.run_hook(ref, ref.pre_stop)
            else:
                failed = True
        except EngineUnavailable:
            failed = True  # its exec session was lost with the connection: go on to the signal
        except EngineError as exc:
            self.books.error(f"pre_stop of {ref.name}: {exc}")
            failed = True
        finally:
            # Cut off by the deadline (or a cancellation): no exit code, and no error either.
            timed_out = exit_code is None and not failed
            self.books.emit(
                PreStopFinished(**self.books.at(t), exit_code=exit_code, timed_out=timed_out)
            )

    async def _stop_one(self, t: _Tracked) -> None:
        ref = t.ref
        try:
            if ref.restart_policy != "no" and self.ops.kill_triggers_restart:
                self._signalled(t)
                exit_code = await self._call(
                    lambda: self.ops.stop(ref, max(0.0, self.books.deadline - self.books.clock()))
                )
                delivered = True
            else:
                delivered = await self._call(lambda: self.ops.signal(ref, ref.stop_signal))
                if delivered:
                    self._signalled(t)
                    exit_code = await self._exit_of(ref)
                else:
                    exit_code = await self._call(lambda: self.ops.wait_exit(ref))
        except WorkloadNotFound:
            t.outcome = "missing"  # removed by hand, or by another delete: not a failure
            return
        except EngineError as exc:
            self._failed(f"stop {ref.name}", exc)
            return
        self._exited(t, exit_code, "exited" if delivered else "already-exited")

    async def _exit_of(self, ref: ContainerRef) -> int | None:
        """The exit code of a container just signalled: from the exit stream, else (the stream
        was cut, or never opened) from the engine's wait."""
        try:
            return await self.exits.wait_exit(ref.id)
        except ExitStreamLost:
            pass
        return await self._call(lambda: self.ops.wait_exit(ref))

    async def _exit_of_killed(self, ref: ContainerRef) -> int | None:
        """The exit code of a container just sent SIGKILL (see :func:`first_exit`)."""
        return await first_exit(
            self.exits, ref.id, lambda: self._call(lambda: self.ops.wait_killed(ref))
        )

    def _signalled(self, t: _Tracked) -> None:
        self.books.emit(SignalSent(**self.books.at(t), signal=t.ref.stop_signal))

    def _exited(self, t: _Tracked, exit_code: int | None, outcome: Outcome) -> None:
        t.outcome, t.exit_code, t.seconds = outcome, exit_code, self.books.elapsed()
        self.books.emit(
            ContainerExited(**self.books.at(t), exit_code=exit_code, graceful=outcome != "killed")
        )

    # --- the cleanup (shielded) --------------------------------------------------------------

    async def _end_all(self) -> None:
        """SIGKILL what still runs; remove each container as soon as its end is seen, the pause
        container last, then the volumes."""
        async with anyio.create_task_group() as removals:
            async with anyio.create_task_group() as kills:
                for ref in self.snapshot.containers:
                    if ref.role not in _DRAINED or ref.id in self.gone:
                        continue
                    t = self._tracked(ref)
                    if t is not None and t.outcome is None:
                        kills.start_soon(self._kill_then_remove, t, removals)
                    else:
                        removals.start_soon(self._remove_one, ref)
                if self.books.grace == 0:
                    kills.start_soon(self._kill_pause)  # nothing drains: it can die with them
            # Every container has stopped: the pause container's network teardown can overlap
            # their removal. Its own removal still waits (Podman refuses it before theirs).
            removals.start_soon(self._kill_pause)
        for ref in self.snapshot.containers:
            if ref.role == "pause" and ref.id not in self.gone:
                await self._remove_one(ref)
        try:
            await self._call(lambda: self.ops.remove_volumes(self.name))
        except EngineError as exc:
            self._failed("remove volumes", exc)

    async def _kill_then_remove(self, t: _Tracked, removals: TaskGroup) -> None:
        await self._kill_one(t)
        removals.start_soon(self._remove_one, t.ref)

    async def _kill_pause(self) -> None:
        """SIGKILL the pause container, once (it has nothing to drain; removal comes last)."""
        for ref in self.snapshot.containers:
            if ref.role == "pause" and ref.running and ref.id not in self.pause_killed:
                self.pause_killed.add(ref.id)
                try:
                    await self._call(lambda ref=ref: self.ops.signal(ref, "SIGKILL"))  # type: ignore[misc]
                except WorkloadNotFound:
                    pass
                except EngineError as exc:
                    self._failed(f"kill {ref.name}", exc)

    async def _kill_one(self, t: _Tracked) -> None:
        ref = t.ref
        reason = "deadline" if self.books.clock() >= self.books.deadline else "cancelled"
        try:
            delivered = await self._call(lambda: self.ops.signal(ref, "SIGKILL"))
            # Not delivered after the pause was killed: it died with its pause, by our hand.
            killed = delivered or bool(self.pause_killed)
            if killed:
                self.books.emit(ContainerForceKilled(**self.books.at(t), reason=reason))
            with anyio.move_on_after(KILL_WAIT):
                exit_code = await self._exit_of_killed(ref)
                self._exited(t, exit_code, "killed" if killed else "exited")
        except WorkloadNotFound:
            t.outcome = "missing"
        except EngineError as exc:
            self._failed(f"kill {ref.name}", exc)

    async def _remove_one(self, ref: ContainerRef) -> None:
        try:
            await self._call(lambda: self.ops.remove(ref))
        except WorkloadNotFound:
            pass  # removed by hand, or by another delete: not a failure
        except EngineError as exc:
            self._failed(f"remove {ref.name}", exc)
            return
        self.gone.add(ref.id)
        self._removed(ref)

    def _removed(self, ref: ContainerRef) -> None:
        tracked = self._tracked(ref)
        if tracked is not None and tracked.outcome is None:
            tracked.outcome = "missing"
        event = PauseRemoved if ref.role == "pause" else ContainerRemoved
        self.books.emit(event(**self.books.at(), container=ref.name, role=ref.role))


async def drain_workloads(
    ops: ContainerOps,
    snapshots: Sequence[WorkloadSnapshot],
    *,
    grace_period_seconds: int | None,
    emit: Emit,
    engine: str = "engine",
) -> list[DrainSummary]:
    """Drain every snapshot concurrently, all timed from one start.

    Raises ``DrainUnreachable`` (with every summary) when the engine stayed unreachable.
    """
    started = anyio.current_time()  # the grace counts from here, the stream's opening included
    async with ops.exits() as exits:  # before the first signal: every exit reaches it
        drains = [
            _WorkloadDrain(
                ops=ops,
                snapshot=s,
                exits=exits,
                books=DrainBooks(
                    workload=s.name,
                    grace=effective_grace(s.grace_period_seconds, grace_period_seconds),
                    started=started,
                    emit=emit,
                ),
            )
            for s in snapshots
        ]
        summaries = await _run_all(drains)
    # Raised out here: an error inside the stream's task group would reach the caller grouped.
    if any(d.lost for d in drains):
        raise DrainUnreachable(summaries, engine=engine)
    return summaries


async def _run_all(drains: Sequence[_WorkloadDrain]) -> list[DrainSummary]:
    summaries: list[DrainSummary | None] = [None] * len(drains)

    async def one(i: int) -> None:
        summaries[i] = await drains[i].run()

    async with anyio.create_task_group() as tg:
        for i in range(len(drains)):
            tg.start_soon(one, i)
    return [s for s in summaries if s is not None]
