"""The drain of container-engine workloads: one deadline, the ordering, and the events.

For each workload, in this order:

1. remove the autoheal sidecar, so it cannot resurrect a container being drained;
2. run every ``pre_stop`` hook concurrently, inside the deadline;
3. send every running container its stop signal at once, and wait for the exits concurrently;
4. at the deadline, SIGKILL whatever still runs (grace 0: at once, with no hooks and no TERM);
5. remove the containers, then the pause container last (it holds the namespaces the others
   share: removing it first SIGKILLs them on Docker and is refused by Podman), then the volumes.

Steps 4 and 5 run shielded and bounded, so they complete even when the caller cancels. A step
that fails is recorded in the summary and the drain goes on; the caller gets a ``DrainError``
once everything that could be cleaned was cleaned.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar, Literal, Protocol

import anyio
import attrs

from asyncdeploy.errors import EngineError, WorkloadNotFound
from asyncdeploy.events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerOutcome,
    ContainerRemoved,
    DrainFinished,
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

__all__ = ["CLEANUP_TIMEOUT", "ContainerOps", "ContainerRef", "WorkloadSnapshot", "drain_workloads"]

CLEANUP_TIMEOUT = 60.0  # bound on the shielded kill-and-remove part
KILL_WAIT = 10.0  # how long a SIGKILLed container may take to be reported gone

Role = Literal["pause", "init", "run", "autoheal"]


@attrs.frozen(kw_only=True)
class ContainerRef:
    id: str
    name: str
    role: Role
    running: bool
    exit_code: int | None = None
    pre_stop: tuple[str, ...] | None = None
    stop_signal: str = "SIGTERM"
    restart_policy: str = "no"


@attrs.frozen(kw_only=True)
class WorkloadSnapshot:
    name: str
    grace_period_seconds: int
    containers: tuple[ContainerRef, ...]


class ContainerOps(Protocol):
    """The engine calls a drain needs; each raises ``EngineError`` subclasses only."""

    kill_triggers_restart: ClassVar[bool]
    """True where a signalled container that exits is restarted under its restart policy
    (Podman): such containers are stopped with :meth:`stop` instead."""

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        """Send ``signal``; False when the container was not running."""
        ...

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        """Wait until the container is not running; return its exit code."""
        ...

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """The same, for a container just sent SIGKILL (it must not wait on anything else)."""
        ...

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        """Stop with the container's stop signal, as a stop that no restart policy undoes."""
        ...

    async def remove(self, ref: ContainerRef) -> None: ...

    async def run_hook(self, ref: ContainerRef, command: Sequence[str]) -> int:
        """Exec ``command`` in the container; return its exit code."""
        ...

    async def remove_volumes(self, workload: str) -> None: ...


@attrs.define
class _Tracked:
    ref: ContainerRef
    outcome: Outcome | None = None
    exit_code: int | None = None
    seconds: float | None = None


@attrs.define
class _WorkloadDrain:
    """The state of one workload's drain; every engine error becomes a line in ``errors``."""

    ops: ContainerOps
    snapshot: WorkloadSnapshot
    grace: int
    started: float  # anyio.current_time() when the whole drain began
    emit: Emit
    tracked: list[_Tracked] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    pause_killed: set[str] = attrs.field(factory=set)

    @property
    def name(self) -> str:
        return self.snapshot.name

    def elapsed(self) -> float:
        return anyio.current_time() - self.started

    async def run(self) -> DrainSummary:
        refs = self.snapshot.containers
        self.tracked = [_Tracked(r) for r in refs if r.role in ("init", "run")]
        for t in self.tracked:
            if not t.ref.running:
                t.outcome, t.exit_code = "already-exited", t.ref.exit_code
        deadline = self.started + self.grace
        self.emit(
            DrainStarted(
                workload=self.name,
                elapsed=self.elapsed(),
                grace_period_seconds=self.grace,
                deadline=time.time() + (deadline - anyio.current_time()),
                containers=tuple(r.name for r in refs),
            )
        )
        try:
            for sidecar in (r for r in refs if r.role == "autoheal"):
                await self._remove_sidecar(sidecar)
            if self.grace > 0:
                with anyio.move_on_at(deadline):
                    await self._pre_stop_hooks()
                with anyio.move_on_at(deadline):
                    await self._signal_and_wait()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT) as scope:
                await self._kill_survivors()
                await self._remove_all()
            if scope.cancelled_caught:
                self.errors.append(f"cleanup did not finish within {CLEANUP_TIMEOUT:.0f} s")
            # In the finally too: a cancelled drain still reports how it ended.
            summary = self._finish()
        return summary

    def _finish(self) -> DrainSummary:
        summary = DrainSummary(
            workload=self.name,
            grace_period_seconds=self.grace,
            seconds=self.elapsed(),
            containers=tuple(
                ContainerOutcome(
                    name=t.ref.name,
                    role=t.ref.role,
                    outcome=t.outcome or "missing",
                    exit_code=t.exit_code,
                    seconds=t.seconds,
                )
                for t in self.tracked
            ),
            errors=tuple(self.errors),
        )
        self.emit(DrainFinished(workload=self.name, elapsed=self.elapsed(), summary=summary))
        return summary

    async def _remove_sidecar(self, ref: ContainerRef) -> None:
        try:
            if ref.running:
                await self.ops.signal(ref, "SIGKILL")  # nothing to drain in a sidecar
            await self.ops.remove(ref)
        except WorkloadNotFound:
            pass
        except EngineError as exc:
            self.errors.append(f"remove {ref.name}: {exc}")
            return
        self.emit(SidecarRemoved(workload=self.name, elapsed=self.elapsed(), container=ref.name))

    async def _pre_stop_hooks(self) -> None:
        async with anyio.create_task_group() as tg:
            for t in self.tracked:
                if t.outcome is None and t.ref.pre_stop:
                    tg.start_soon(self._pre_stop, t.ref)

    async def _pre_stop(self, ref: ContainerRef) -> None:
        assert ref.pre_stop is not None
        self.emit(
            PreStopStarted(
                workload=self.name, elapsed=self.elapsed(), container=ref.name, role=ref.role
            )
        )
        exit_code: int | None = None
        failed = False
        try:
            exit_code = await self.ops.run_hook(ref, ref.pre_stop)
        except EngineError as exc:
            self.errors.append(f"pre_stop of {ref.name}: {exc}")
            failed = True
        finally:
            # Cut off by the deadline (or a cancellation): no exit code, and no error either.
            timed_out = exit_code is None and not failed
            self.emit(
                PreStopFinished(
                    workload=self.name,
                    elapsed=self.elapsed(),
                    container=ref.name,
                    role=ref.role,
                    exit_code=exit_code,
                    timed_out=timed_out,
                )
            )

    async def _signal_and_wait(self) -> None:
        async with anyio.create_task_group() as tg:
            for t in self.tracked:
                if t.outcome is None:
                    tg.start_soon(self._stop_one, t)

    async def _stop_one(self, t: _Tracked) -> None:
        ref = t.ref
        try:
            if ref.restart_policy != "no" and self.ops.kill_triggers_restart:
                self._signalled(t)
                remaining = self.started + self.grace - anyio.current_time()
                exit_code = await self.ops.stop(ref, max(0.0, remaining))
                delivered = True
            else:
                delivered = await self.ops.signal(ref, ref.stop_signal)
                if delivered:
                    self._signalled(t)
                exit_code = await self.ops.wait_exit(ref)
        except WorkloadNotFound:
            t.outcome = "missing"
            return
        except EngineError as exc:
            self.errors.append(f"stop {ref.name}: {exc}")
            return
        self._exited(t, exit_code, "exited" if delivered else "already-exited")

    def _signalled(self, t: _Tracked) -> None:
        self.emit(
            SignalSent(
                workload=self.name,
                elapsed=self.elapsed(),
                container=t.ref.name,
                role=t.ref.role,
                signal=t.ref.stop_signal,
            )
        )

    def _exited(self, t: _Tracked, exit_code: int | None, outcome: Outcome) -> None:
        t.outcome, t.exit_code, t.seconds = outcome, exit_code, self.elapsed()
        self.emit(
            ContainerExited(
                workload=self.name,
                elapsed=t.seconds,
                container=t.ref.name,
                role=t.ref.role,
                exit_code=exit_code,
                graceful=outcome != "killed",
            )
        )

    async def _kill_survivors(self) -> None:
        async with anyio.create_task_group() as tg:
            for t in self.tracked:
                if t.outcome is None:
                    tg.start_soon(self._kill_one, t)
            if self.grace == 0:
                tg.start_soon(self._kill_pause)  # nothing drains: the pause can die with them

    async def _kill_pause(self) -> None:
        """SIGKILL the pause container, once (it has nothing to drain; removal comes last)."""
        for ref in self.snapshot.containers:
            if ref.role == "pause" and ref.running and ref.id not in self.pause_killed:
                self.pause_killed.add(ref.id)
                try:
                    await self.ops.signal(ref, "SIGKILL")
                except WorkloadNotFound:
                    pass
                except EngineError as exc:
                    self.errors.append(f"kill {ref.name}: {exc}")

    async def _kill_one(self, t: _Tracked) -> None:
        ref = t.ref
        past_deadline = anyio.current_time() >= self.started + self.grace
        reason = "deadline" if past_deadline else "cancelled"
        try:
            delivered = await self.ops.signal(ref, "SIGKILL")
            if delivered:
                self.emit(
                    ContainerForceKilled(
                        workload=self.name,
                        elapsed=self.elapsed(),
                        container=ref.name,
                        role=ref.role,
                        reason=reason,
                    )
                )
            with anyio.move_on_after(KILL_WAIT):
                exit_code = await self.ops.wait_killed(ref)
                self._exited(t, exit_code, "killed" if delivered else "exited")
        except WorkloadNotFound:
            t.outcome = "missing"
        except EngineError as exc:
            self.errors.append(f"kill {ref.name}: {exc}")

    async def _remove_all(self) -> None:
        async with anyio.create_task_group() as tg:
            for ref in self.snapshot.containers:
                if ref.role in ("init", "run"):
                    tg.start_soon(self._remove_one, ref)
            # Every container has stopped: the pause container's network teardown can overlap
            # their removal. Its own removal still waits (Podman refuses it before theirs).
            tg.start_soon(self._kill_pause)
        for ref in self.snapshot.containers:
            if ref.role == "pause":
                await self._remove_one(ref)
        try:
            await self.ops.remove_volumes(self.name)
        except EngineError as exc:
            self.errors.append(f"remove volumes: {exc}")

    async def _remove_one(self, ref: ContainerRef) -> None:
        try:
            await self.ops.remove(ref)
        except WorkloadNotFound:
            for t in self.tracked:
                if t.ref is ref and t.outcome is None:
                    t.outcome = "missing"
            return
        except EngineError as exc:
            self.errors.append(f"remove {ref.name}: {exc}")
            return
        event = PauseRemoved if ref.role == "pause" else ContainerRemoved
        self.emit(
            event(workload=self.name, elapsed=self.elapsed(), container=ref.name, role=ref.role)
        )


async def drain_workloads(
    ops: ContainerOps,
    snapshots: Sequence[WorkloadSnapshot],
    *,
    grace_period_seconds: int | None,
    emit: Emit,
) -> list[DrainSummary]:
    """Drain every snapshot concurrently, all timed from one start."""
    started = anyio.current_time()
    drains = [
        _WorkloadDrain(
            ops=ops,
            snapshot=s,
            grace=s.grace_period_seconds if grace_period_seconds is None else grace_period_seconds,
            started=started,
            emit=emit,
        )
        for s in snapshots
    ]
    summaries: list[DrainSummary | None] = [None] * len(drains)

    async def one(i: int) -> None:
        summaries[i] = await drains[i].run()

    async with anyio.create_task_group() as tg:
        for i in range(len(drains)):
            tg.start_soon(one, i)
    return [s for s in summaries if s is not None]
