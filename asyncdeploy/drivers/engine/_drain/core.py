"""One workload's engine drain as a state machine: observations in, commands out. Pure.

The machine (this module: the claim; the shared books and the command plumbing are
:mod:`.context`'s) is told what happened (an operation's answer, a timer that fired, the
caller's kill request, each with the time on the loop's clock) and says what to do next (an
engine operation, a timer, a cancellation, an event: :mod:`.protocol`); it never awaits and
never calls the engine, so every order and every fault is tested without one. The loop
(:mod:`.loop`) carries the commands out over ``ContainerOps``.

Its states, in the order a drain meets them:

- **claiming**: the autoheal sidecar is killed and removed (so it cannot resurrect a draining
  container) while the drain is claimed by pausing the pause container: one call, and the only
  one before the signals. A pause refused because it is paused already means another delete
  drains it.
- **draining** (the owner, :mod:`.pipelines`): one pipeline per init and run container,
  then per sidecar, under the one deadline: its ``pre_stop`` hook, its stop signal (once), the
  wait for its exit. A drain still running ``record_delay`` after its start records its claim
  (:mod:`._claim`).
- **following** (a second delete, :mod:`.follow`): it reports the exits and removals it
  sees and never signals, until the workload is gone; **taking over** when the owner is dead
  (its process gone, no record for ``record_wait``, or past its deadline plus ``owner_bound``):
  it records its own claim, checks after ``takeover_settle`` that no other follower's replaced
  it, then drains with a full grace from then on, except for the containers the dead owner had
  signalled.
- **cleaning** (:mod:`.cleanup`): at the deadline (or when every pipeline ended, or on
  the kill request), what still runs is SIGKILLed; each container is removed once its end is
  seen, the pause container last (it holds the namespaces), then the volumes; bounded by
  ``cleanup_timeout``.
- **done**: the summary, ``DrainFinished``.

Every decision is made here, on answers: a call lost with the connection asked again or given
up on, a lost stop answer, a restart, a hook against its container's death, the exit stream
against the engine's wait or a look (:mod:`.ends`); the loop makes single calls. A failing step
is a line in the summary and the drain goes on; an engine unreachable past the give-up rule
(:func:`~.context.gives_up`) makes the containers whose end was not seen ``unreachable``.
"""

from __future__ import annotations

from collections.abc import Callable

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, EngineUnavailable, WorkloadNotFound
from asyncdeploy._events import (
    DrainStarted,
    SidecarRemoved,
)
from asyncdeploy.drivers.engine._claim import ClaimRecord, Owner, new_record
from asyncdeploy.drivers.engine._drain.cleanup import Cleanup
from asyncdeploy.drivers.engine._drain.context import DrainContext
from asyncdeploy.drivers.engine._drain.follow import Following
from asyncdeploy.drivers.engine._drain.pipelines import OwnerDrain
from asyncdeploy.drivers.engine._drain.protocol import (
    Answer,
    Claim,
    ClaimSeen,
    Command,
    Done,
    DrainTimings,
    Key,
    Kill,
    LookPause,
    ReadClaim,
    Remove,
    Sent,
    Then,
)
from asyncdeploy.drivers.engine._ops import (
    ClaimAnswer,
    ContainerLook,
    ContainerRef,
    WorkloadSnapshot,
)

__all__ = ["WorkloadDrain"]


class WorkloadDrain(DrainContext):
    """One workload's drain. ``start`` and ``observe`` return the commands to carry out."""

    def __init__(
        self,
        snapshot: WorkloadSnapshot,
        *,
        grace: int,
        started: float,
        wall_started: float,
        timings: DrainTimings,
        me: Owner,
        kill_triggers_restart: bool = False,
        keep_volumes: bool = False,
        claim_is_record: bool = False,
    ) -> None:
        self.claim_is_record = claim_is_record  # the claim writes the record (Docker)
        super().__init__(
            snapshot,
            grace=grace,
            started=started,
            wall_started=wall_started,
            timings=timings,
            me=me,
            kill_triggers_restart=kill_triggers_restart,
            keep_volumes=keep_volumes,
        )
        self._opening: set[str] = set()  # what must end before the pipelines: sidecars, claim
        self._begin: Callable[[], None] | None = None  # how the drain goes on, when not the usual
        # the states after the claim, each its own small machine over these books
        self.cleanup = Cleanup(self)
        self.owner_drain = OwnerDrain(self, clean_up=self.clean_up)
        self.following = Following(self, drain=self.owner_drain.start)

    def start(self) -> list[Command]:
        for t in self.tracked:
            if not t.ref.running:
                t.outcome, t.exit_code = "already-exited", t.ref.exit_code
        self.books.emit(
            DrainStarted(
                **self.books.at(),
                grace_period_seconds=self.books.grace,
                deadline=self.books.deadline + self.wall_offset,
                containers=tuple(r.name for r in self.snapshot.containers),
            )
        )
        for ref in self.snapshot.containers:
            if ref.role == "autoheal":  # nothing to drain: killed (when it runs) and removed
                self._opening.add(ref.name)
                if ref.running:
                    self.do(("sidecar", ref.name), Kill(ref), self._sidecar_killed(ref))
                else:
                    self._remove_sidecar(ref)
        self._opening.add("")
        self._claim()
        return self._flush()

    def observe(self, key: Key, answer: Answer, now: float) -> list[Command]:
        """An operation's answer (or ``Fired.FIRED``: a timer) under ``key``, at ``now``."""
        self.now = max(self.now, now)
        self.answer(key, answer)
        return self._flush()

    def kill(self, now: float) -> list[Command]:
        """The caller's kill request: what still runs is killed at once, and all removed."""
        self.now = max(self.now, now)
        if not self.cleaning:
            self.cut = True
            self.clean_up()
        return self._flush()

    # --- commands ----------------------------------------------------------------------------

    def _sidecar_killed(self, ref: ContainerRef) -> Then[Sent]:
        def then(answer: Sent | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES):  # gone already, or a failure to tell
                self._sidecar_removed(ref)(answer)
            else:
                self._remove_sidecar(ref)

        return then

    def _remove_sidecar(self, ref: ContainerRef) -> None:
        self.do(("sidecar", ref.name), Remove(ref), self._sidecar_removed(ref))

    def _sidecar_removed(self, ref: ContainerRef) -> Then[Done]:
        def then(answer: Done | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.failed(f"remove {ref.name}", answer)
            else:
                self.gone.add(ref.id)
                self.books.emit(SidecarRemoved(**self.books.at(), container=ref.name))
            self._opened(ref.name)

        return then

    def _opened(
        self, part: str, *, owner: bool | None = None, begin: Callable[[], None] | None = None
    ) -> None:
        """``part`` of the opening ended; once all have (the autoheal gone, the claim settled),
        the drain goes on as the claim decided: ``begin`` when it said how (a take-over),
        else as the owner or as a follower."""
        if owner is not None:
            self.owner = owner
        if begin is not None:
            self._begin = begin
        self._opening.discard(part)
        if self._opening or self.cleaning:
            return
        if self._begin is not None:
            self._begin()
        elif self.owner:
            self.owner_drain.start()
        else:
            self.following.start()

    def _claim(self) -> None:
        pause = self.pause
        if pause is None or self.books.grace == 0:
            self._opened("", owner=True)  # grace 0 kills at once: no drain to protect
        elif pause.paused:
            self._opened("", owner=False)
        elif not pause.running:  # killed in another delete's cleanup: its record tells
            self.do(("claim", ""), ReadClaim(pause), self._claim_read)
        else:
            started = self.books.started + self.wall_offset  # the owner's deadline, in its record
            record = new_record(self.me, started=started, grace=self.books.grace)
            self.do(("claim", ""), Claim(pause, record), self._claimed(record))

    def _claim_read(self, answer: ClaimSeen | EngineFailure) -> None:
        held = isinstance(answer, ClaimSeen) and answer.record is not None
        self._opened("", owner=not held)

    def _claimed(self, record: ClaimRecord) -> Then[ClaimAnswer]:
        def then(answer: ClaimAnswer | EngineFailure) -> None:
            pause = self.pause
            assert pause is not None
            if answer is ClaimAnswer.CLAIMED:
                self.record = record
                self.record_written = self.claim_is_record  # Docker: the claim is the record
                self._opened("", owner=True)
            elif answer is ClaimAnswer.HELD:  # another delete holds the claim: follow it
                self._opened("", owner=False)
            elif answer is ClaimAnswer.REFUSED:  # paused by another, or not running: a look says
                self.do(("claim", ""), LookPause(pause), self._pause_looked)
            elif isinstance(answer, WorkloadNotFound):
                self._opened("", owner=True)  # gone: nothing to claim
            elif isinstance(answer, EngineUnavailable):
                self.failed(f"claim the drain of {self.name}", answer)
                self._opened("", owner=True)
            else:  # an engine that cannot pause (no cgroup freezer): the record alone decides
                self.do(("claim", ""), ReadClaim(pause), self._claim_by_record)

        return then

    def _pause_looked(self, answer: ContainerLook | EngineFailure | None) -> None:
        if isinstance(answer, EngineUnavailable):
            self.failed(f"claim the drain of {self.name}", answer)
        paused = isinstance(answer, ContainerLook) and answer.paused
        self._opened("", owner=not paused)

    def _claim_by_record(self, answer: ClaimSeen | EngineFailure) -> None:
        if not isinstance(answer, ClaimSeen):
            self._opened("", owner=True)  # nothing can be recorded: it drains unclaimed
            return
        found = answer.record
        if (
            found is not None
            and answer.owner_alive is not False
            and self.wall < found.deadline + self.timings.owner_bound
        ):
            self._opened("", owner=False)
            return

        def take_over() -> None:
            self.state = "taking-over"
            self.following.take_over(found, own_deadline=True)

        # not at once: the autoheal's removal may still be under way (the signals wait for it)
        self._opened("", begin=take_over)

    # --- what every state writes down --------------------------------------------------------

    def clean_up(self) -> None:
        """Kill what still runs and remove everything, once; a cut follower kills too: the
        caller asked to kill now."""
        if self.cleaning:
            return
        self.cleaning = True
        self.owner_drain.cut()
        self.cancel(k for k in self._then if k != ("record", ""))  # the record still tells
        if self.cut:
            self.owner = True
        if not self.owner:
            self.finish()
            return
        self.state = "cleaning"
        self.cleanup.start()
