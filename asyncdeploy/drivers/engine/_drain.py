"""The drain of container-engine workloads: one deadline, one pipeline per container, the events.

For each workload:

1. remove the autoheal sidecar (so it cannot resurrect a container being drained) and, at the
   same time, claim the drain: pause the pause container, then write the claim record into it
   (who drains, since when, under which grace; rewritten every second: :mod:`._claim`). A
   delete that finds it already paused follows the other delete instead (:mod:`._follow`): it
   never signals, never shortens the other's drain (it follows the owner's recorded grace), and
   takes over only when the owner is dead (its process gone, its beat stopped, or no record at
   all). A takeover drains: hooks, stop signals and a full grace from then on, except for the
   containers the dead owner recorded as signalled (a stop signal is never sent twice);
2. run one pipeline per init and run container, all under the one deadline: its ``pre_stop``
   hook (a hook that fails goes straight on), its stop signal, the wait for its exit. One hung
   hook delays no other container's signal;
3. at the deadline, SIGKILL whatever still runs (grace 0: at once, with the pause container, and
   no hooks and no TERM), and remove each container as soon as its end is seen;
4. remove the pause container last (it holds the namespaces the others share: removing it
   first SIGKILLs them on Docker and is refused by Podman), then the volumes.

Exits come from one engine event stream per :func:`drain_workloads` (:mod:`._exits`): Podman's
``wait`` answers only after its cleanup (0.4-1.6 s after the ``die`` event, measured) and holds
one of its few API workers meanwhile. The stream opens while the first hooks and signals go
out (its opening must not eat a short grace): an exit before it opened is seen by one look
once it has. The engine's ``wait`` is the fallback for a stream cut or never opened.

A stop signal is sent once. A lost answer to it (the connection was cut after the request went
out) is not retried: it may have landed; only a call that never reached the engine is.

An engine call lost with the connection (``EngineUnavailable``) is retried with backoff, the
wait re-armed, until the deadline: a connection that blinks kills nothing. An engine still
unreachable ``GIVE_UP_AFTER`` past the deadline ends the drain: the containers whose end was
not seen are ``unreachable`` and the call raises ``DrainUnreachable`` (the CLI's exit 3).

Steps 3 and 4 run shielded and bounded, so they complete even when the caller cancels, and
``DrainFinished`` with the summary is emitted in every case. A cancellation is the caller's
"kill now" (the CLI's second Ctrl-C): from whatever point it lands (the stream opening, the
claim, the hooks, or while following another delete), what still runs is SIGKILLed and
removed, and the summary says how each container ended. Another failing step is written in
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

from asyncdeploy.drivers._books import DrainBooks, effective_grace
from asyncdeploy.drivers.engine import _follow
from asyncdeploy.drivers.engine._claim import BEAT_INTERVAL, ClaimRecord, new_record
from asyncdeploy.drivers.engine._drain_state import DrainState, gives_up
from asyncdeploy.drivers.engine._exits import ExitWatch
from asyncdeploy.drivers.engine._ops import (
    CallNotSent,
    ContainerOps,
    ContainerRef,
    WorkloadSnapshot,
)
from asyncdeploy.drivers.engine._pipeline import Pipelines, TrackedRef
from asyncdeploy.errors import (
    ENGINE_FAILURES,
    DrainUnreachable,
    EngineFailure,
    EngineUnavailable,
    WorkloadNotFound,
)
from asyncdeploy.events import (
    ContainerForceKilled,
    ContainerRemoved,
    DrainStarted,
    DrainSummary,
    Emit,
    PauseRemoved,
    SidecarRemoved,
)

__all__ = ["CLEANUP_TIMEOUT", "drain_workloads"]

CLEANUP_TIMEOUT = 60.0  # bound on the shielded kill-and-remove part
KILL_WAIT = 10.0  # how long a SIGKILLed container may take to be reported gone
RETRY_FIRST, RETRY_MAX = 0.05, 1.0  # backoff between tries of a call lost with the connection
GIVE_UP_AFTER = 5.0  # past the deadline: how long the engine may stay unreachable
SIGKILLED = 137
_DRAINED = ("init", "run", "sidecar")  # the roles whose containers get a pipeline

T = TypeVar("T")


@attrs.define(kw_only=True)
class _WorkloadDrain(Pipelines):
    """One workload's drain; every engine error becomes a line in ``books.errors``."""

    ops: ContainerOps
    snapshot: WorkloadSnapshot
    books: DrainBooks
    exits: ExitWatch  # the drain's one exit stream, shared by every workload
    keep_volumes: bool = False  # a recreate's drain: the plan's next instance mounts them
    tracked: list[TrackedRef] = attrs.field(factory=list)
    state: DrainState = attrs.field(factory=DrainState)
    # the claim record this drain writes while it owns a claimed drain (see _claim.py)
    record: ClaimRecord | None = None
    record_lock: anyio.Lock = attrs.field(factory=anyio.Lock)
    record_asked: int = 0  # writes asked for, and the last one a write covered
    record_written: int = 0
    beat_scope: anyio.CancelScope = attrs.field(factory=lambda: anyio.CancelScope(shield=True))
    summary: DrainSummary | None = None

    @property
    def name(self) -> str:
        return self.snapshot.name

    async def run(self) -> DrainSummary:
        books, refs = self.books, self.snapshot.containers
        self.tracked = [
            TrackedRef(name=r.name, role=r.role, ref=r) for r in refs if r.role in _DRAINED
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
        async with anyio.create_task_group() as beats:
            beats.start_soon(self._beat)
            try:
                await self._drain()
            except BaseException:
                self.state.cut = True
                raise
            finally:
                await self.clean_up()
                self.beat_scope.cancel()
        assert self.summary is not None
        return self.summary

    async def _drain(self) -> None:
        books = self.books
        async with anyio.create_task_group() as tg:
            for sidecar in (r for r in self.snapshot.containers if r.role == "autoheal"):
                tg.start_soon(self._remove_sidecar, sidecar)
            self.state.owner = not await self._drained_elsewhere()
        if not self.state.owner:
            self.state.owner = await _follow.follow(self)
            if not self.state.owner:
                return
        if books.grace > 0:
            with anyio.move_on_at(books.deadline):
                # Sidecars (a proxy, the drain gate) are signalled once the others exited.
                for roles in (("init", "run"), ("sidecar",)):
                    async with anyio.create_task_group() as tg:
                        for t in self.tracked:
                            if t.outcome is None and t.role in roles:
                                tg.start_soon(self._pipeline, t)

    async def clean_up(self) -> None:
        """Kill what still runs and remove everything (shielded, bounded), once; then the
        summary. A cancelled follower kills too: the caller asked to kill now."""
        if self.summary is not None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT) as scope:
            if self.state.begin_cleanup():
                await self._end_all()
        if scope.cancelled_caught:
            self.books.error(f"cleanup did not finish within {CLEANUP_TIMEOUT:.0f} s")
        self.summary = self.books.finish(
            self.tracked, unknown="unreachable" if self.state.lost else "missing"
        )

    # --- engine calls: retried while the connection is lost ----------------------------------

    async def _call(self, call: Callable[[], Awaitable[T]], *, once: bool = False) -> T:
        """``call()``, tried again with backoff while the engine is unreachable, until it has
        been unreachable for GIVE_UP_AFTER past the deadline (or, cancelled, in the cleanup).
        ``once``: a call that must not land twice (a stop signal) is tried again only when it
        surely never reached the engine; a lost answer is raised."""
        pause = RETRY_FIRST
        while True:
            try:
                result = await call()
            except EngineUnavailable as exc:
                if once and not isinstance(exc, CallNotSent):
                    raise
                now = self.books.clock()
                since = self.state.unreachable(now)
                if gives_up(
                    now,
                    deadline=self.books.deadline,
                    unreachable_since=since,
                    cleaning=self.state.cleaning,
                    after=GIVE_UP_AFTER,
                ):
                    raise
                await anyio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
            else:
                self.state.reached()
                return result

    def failed(self, what: str, exc: EngineFailure) -> None:
        if isinstance(exc, EngineUnavailable):
            if not self.state.lost:
                self.state.lost = True
                self.books.error(
                    f"engine unreachable for {GIVE_UP_AFTER:g} s past the deadline "
                    f"({exc.message}); delete again once it answers"
                )
        else:
            self.books.error(f"{what}: {exc}")

    # --- one delete at a time: the claim -----------------------------------------------------

    def pause(self) -> ContainerRef | None:
        return next((r for r in self.snapshot.containers if r.role == "pause"), None)

    async def _drained_elsewhere(self) -> bool:
        """Claim the drain; True when another delete holds the claim (it pauses the pause)."""
        pause = self.pause()
        if pause is None or self.books.grace == 0:
            return False  # grace 0 kills at once: there is no drain to shorten
        if pause.paused:
            return True
        if not pause.running:  # killed in another delete's cleanup: its record tells
            try:
                return await self._call(lambda: self.ops.read_claim(pause)) is not None
            except ENGINE_FAILURES:
                return False
        try:
            if await self._call(lambda: self.ops.claim(pause)):
                # written by the first stop signal's record, else the first beat: before a
                # follower gives up waiting for one (RECORD_WAIT)
                self.record = new_record(self.books.grace)
                return False
            look = await self._call(lambda: self.ops.look(pause))
        except EngineUnavailable as exc:
            self.failed(f"claim the drain of {self.name}", exc)
            return False
        except WorkloadNotFound:
            return False  # gone: nothing to claim
        except ENGINE_FAILURES:
            # An engine that cannot pause (no cgroup freezer): the claim record alone decides.
            return await _follow.claim_by_record(self)
        return look is not None and look.paused

    async def write_record(self, record: ClaimRecord | None = None) -> None:
        """Write this drain's claim record (a new one, or the current one bumped: its beat and
        the containers signalled). Concurrent asks share one write: the one that starts after
        them. Best effort: a follower without a record takes over after a while, which is
        what this owner's death would mean anyway."""
        pause = self.pause()
        if record is not None:
            self.record = record
        self.record_asked += 1
        asked = self.record_asked
        async with self.record_lock:
            if self.record_written >= asked:
                return  # written meanwhile, with this ask's state
            if self.record is None or pause is None or pause.id in self.state.gone:
                return
            self.record_written = self.record_asked
            self.record = self.record.bumped(tuple(sorted(self.state.signalled)))
            try:
                await self.ops.write_claim(pause, self.record)
            except WorkloadNotFound:
                self.record = None  # the pause is gone: nothing to claim any more
            except ENGINE_FAILURES:
                pass

    async def _beat(self) -> None:
        """The owner's heartbeat, until the drain's very end (shielded: a cancelled drain
        still beats while its cleanup runs, so no follower takes that over)."""
        with self.beat_scope:
            while True:
                await anyio.sleep(BEAT_INTERVAL)
                if self.state.owner and self.record is not None:
                    await self.write_record()

    async def look_all(self) -> bool:
        """One look at every container not yet seen gone; True when something changed."""
        changed = False
        for ref in self.snapshot.containers:
            if ref.id in self.state.gone:
                continue
            look = await self._call(lambda ref=ref: self.ops.look(ref))  # type: ignore[misc]
            tracked = self._tracked(ref)
            if look is None:
                changed = True
                self.state.gone.add(ref.id)
                if ref.role != "autoheal":
                    self._removed(ref)
            elif tracked is not None and tracked.outcome is None and not look.running:
                changed = True
                self._exited(
                    tracked, look.exit_code, "killed" if look.exit_code == SIGKILLED else "exited"
                )
        return changed

    def _tracked(self, ref: ContainerRef) -> TrackedRef | None:
        return next((t for t in self.tracked if t.ref is ref), None)

    # --- the pipelines -----------------------------------------------------------------------

    async def _remove_sidecar(self, ref: ContainerRef) -> None:
        try:
            if ref.running:
                await self._call(lambda: self.ops.signal(ref, "SIGKILL"))  # nothing to drain
            await self._call(lambda: self.ops.remove(ref))
        except WorkloadNotFound:
            pass
        except ENGINE_FAILURES as exc:
            self.failed(f"remove {ref.name}", exc)
            return
        self.state.gone.add(ref.id)
        self.books.emit(SidecarRemoved(**self.books.at(), container=ref.name))

    # --- the cleanup (shielded) --------------------------------------------------------------

    async def _end_all(self) -> None:
        """SIGKILL what still runs; remove each container as soon as its end is seen, the pause
        container last, then the volumes."""
        async with anyio.create_task_group() as removals:
            async with anyio.create_task_group() as kills:
                for ref in self.snapshot.containers:
                    if ref.role not in _DRAINED or ref.id in self.state.gone:
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
            if ref.role == "pause" and ref.id not in self.state.gone:
                await self._remove_one(ref)
        if self.keep_volumes:
            return  # a recreate: the next instance of the plan mounts them
        try:
            await self._call(lambda: self.ops.remove_volumes(self.snapshot.volume_owner))
        except ENGINE_FAILURES as exc:
            self.failed("remove volumes", exc)

    async def _kill_then_remove(self, t: TrackedRef, removals: TaskGroup) -> None:
        await self._kill_one(t)
        removals.start_soon(self._remove_one, t.ref)

    async def _kill_pause(self) -> None:
        """SIGKILL the pause container, once (it has nothing to drain; removal comes last)."""
        for ref in self.snapshot.containers:
            if ref.role == "pause" and ref.running and ref.id not in self.state.pause_killed:
                self.state.pause_killed.add(ref.id)
                try:
                    await self._call(lambda ref=ref: self.ops.signal(ref, "SIGKILL"))  # type: ignore[misc]
                except WorkloadNotFound:
                    pass
                except ENGINE_FAILURES as exc:
                    self.failed(f"kill {ref.name}", exc)

    async def _kill_one(self, t: TrackedRef) -> None:
        ref = t.ref
        reason = "deadline" if self.books.clock() >= self.books.deadline else "cancelled"
        since = self.exits.mark()
        try:
            delivered = await self._call(lambda: self.ops.signal(ref, "SIGKILL"))
            # Not delivered after the pause was killed: it died with its pause, by our hand.
            killed = delivered or bool(self.state.pause_killed)
            if killed:
                self.books.emit(ContainerForceKilled(**self.books.at(t), reason=reason))
            with anyio.move_on_after(KILL_WAIT):
                exit_code = await self._exit_of_killed(ref, since)
                self._exited(t, exit_code, "killed" if killed else "exited")
        except WorkloadNotFound:
            t.outcome = "missing"
        except ENGINE_FAILURES as exc:
            self.failed(f"kill {ref.name}", exc)

    async def _remove_one(self, ref: ContainerRef) -> None:
        try:
            await self._call(lambda: self.ops.remove(ref))
        except WorkloadNotFound:
            pass  # removed by hand, or by another delete: not a failure
        except ENGINE_FAILURES as exc:
            self.failed(f"remove {ref.name}", exc)
            return
        self.state.gone.add(ref.id)
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
    keep_volumes: bool = False,
) -> list[DrainSummary]:
    """Drain every snapshot concurrently, all timed from one start.

    Raises ``DrainUnreachable`` (with every summary) when the engine stayed unreachable.
    """
    started = anyio.current_time()  # the grace counts from here
    async with ops.exits() as exits:  # it opens while the first hooks and signals go out
        drains = [
            _WorkloadDrain(
                ops=ops,
                snapshot=s,
                exits=exits,
                keep_volumes=keep_volumes,
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
    if any(d.state.lost for d in drains):
        raise DrainUnreachable(summaries, engine=engine)
    return summaries


async def _run_all(drains: Sequence[_WorkloadDrain]) -> list[DrainSummary]:
    summaries: list[DrainSummary | None] = [None] * len(drains)

    async def one(i: int) -> None:
        summaries[i] = await drains[i].run()

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(drains)):
                tg.start_soon(one, i)
    finally:
        for drain in drains:  # cancelled before its run began: it still kills and removes
            if drain.summary is None:
                drain.state.cut = True
                await drain.clean_up()
    return [s for s in summaries if s is not None]
