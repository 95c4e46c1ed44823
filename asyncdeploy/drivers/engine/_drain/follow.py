"""A delete that finds the drain claimed by another: follow it, or take over from a dead one.
Pure.

A state of :class:`~.core.WorkloadDrain`. The follower reports the exits and removals it
sees (the exit stream tells; a look now and then) and never signals while the owner lives,
however long the owner's grace. The owner is checked once the drain has been followed
``record_wait`` (most are over by then): no record by then, its process gone, or still there
past its deadline plus ``owner_bound``, and it is taken over: the follower records its own
claim, checks after ``takeover_settle`` that no other follower's replaced it (the last writer
wins), and drains what is left with a full grace from then on, except for the containers the
dead owner had signalled (its record, and the engine's own kill events, say which).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, WorkloadNotFound
from asyncdeploy.drivers.engine._claim import ClaimRecord, new_record
from asyncdeploy.drivers.engine._drain.context import DrainContext
from asyncdeploy.drivers.engine._drain.protocol import (
    SIGKILLED,
    ClaimSeen,
    Done,
    Fired,
    FollowLook,
    FollowStream,
    LookPause,
    NoStream,
    OwnerAlive,
    OwnerState,
    ReadClaim,
    Seen,
    SignalledBefore,
    Then,
    WriteClaim,
)
from asyncdeploy.drivers.engine._ops import ContainerLook, ContainerRef

__all__ = ["Following"]


class Following:
    def __init__(self, m: DrainContext, *, drain: Callable[[], None]) -> None:
        self.m = m
        self._drain = drain  # the next state
        self._owner_record: ClaimRecord | None = None  # the owner's, as this follower read it
        self._check_at = math.inf  # when the owner is next checked
        self._poll = m.timings.follow.first
        self._fresh_at = -math.inf

    def start(self) -> None:
        """Follow until the workload is gone. The owner is first checked once the drain has
        been followed ``record_wait`` (most are over by then: no read at all); a live owner's
        record is not read again, only whether its process lives (no engine call)."""
        self.m.state = "following"
        self._check_at = self.m.now + self.m.timings.record_wait
        # No look at first: the exit stream tells (a burst of looks by every follower would
        # compete with the owners' signals); one look follow_catch_up in, then rarely (and at
        # every step without a stream: the loop looks when it has nothing else to go by)
        self._fresh_at = (
            self.m.now + self.m.timings.follow_catch_up - self.m.timings.follow_look_every
        )
        self._follow_step()

    def _follow_step(self) -> None:
        refs = tuple(r for r in self.m.snapshot.containers if r.id not in self.m.gone)
        fresh = self.m.now - self._fresh_at >= self.m.timings.follow_look_every
        if fresh:
            self._fresh_at = self.m.now
        until = self.m.now + self._poll
        self._poll = min(self._poll * 2, self.m.timings.follow.longest)
        if fresh:
            self.m.do(("follow", ""), FollowLook(refs), self._followed)
        else:  # the exit stream tells, once it reports something (or at the step's end)
            self.m.do(("follow", ""), FollowStream(refs, until), self._streamed(refs, until))

    def _streamed(self, refs: tuple[ContainerRef, ...], until: float) -> Then[Seen | NoStream]:
        def then(answer: Seen | NoStream | EngineFailure) -> None:
            if answer is NoStream.LOST:  # nothing else to go by: a look, at the step's end
                self.m.wake(("follow", ""), until, lambda _: self._look(refs))
            else:
                self._followed(answer)

        return then

    def _look(self, refs: tuple[ContainerRef, ...]) -> None:
        self.m.do(("follow", ""), FollowLook(refs), self._followed)

    def _followed(self, answer: Seen | EngineFailure) -> None:
        if isinstance(answer, ENGINE_FAILURES):
            self.m.failed(f"follow {self.m.name}", answer)
            self.m.finish()
            return
        self._seen(answer.looks)
        if all(r.id in self.m.gone for r in self.m.snapshot.containers):
            self.m.finish()
        elif self.m.pause is None or self.m.pause.id in self.m.gone or self.m.now < self._check_at:
            self._follow_step()
        elif self._owner_record is None:
            self.m.do(("follow", ""), ReadClaim(self.m.pause), self._owner_read)
        else:
            self.m.do(("follow", ""), OwnerAlive(self._owner_record.owner), self._owner_alive)

    def _seen(self, looks: Mapping[str, ContainerLook | None]) -> None:
        for ref in self.m.snapshot.containers:
            if ref.id in self.m.gone or ref.id not in looks:
                continue
            look, tracked = looks[ref.id], self.m.tracked_ref(ref)
            if look is None:
                self.m.gone.add(ref.id)
                if ref.role != "autoheal":
                    self.m.removed(ref)
            elif tracked is not None and tracked.outcome is None and not look.running:
                code = look.exit_code
                self.m.exited(tracked, code, "killed" if code == SIGKILLED else "exited")

    def _owner_read(self, answer: ClaimSeen | EngineFailure) -> None:
        if isinstance(answer, ENGINE_FAILURES):
            self.m.failed(f"follow {self.m.name}", answer)
            self.m.finish()
            return
        seen = answer
        record = seen.record
        if record is None:  # nobody drains it, or its owner just finished: is the pause there?
            assert self.m.pause is not None
            self.m.do(("follow", ""), LookPause(self.m.pause), self._pause_looked)
        elif self._owner_dead(record, seen.owner_alive):
            self.m.state = "taking-over"
            self.take_over(record, own_deadline=False)
        else:
            self._owner_record = record
            self._owner_checked()

    def _pause_looked(self, answer: ContainerLook | EngineFailure | None) -> None:
        pause = self.m.pause
        assert pause is not None
        if answer is None:  # gone: the owner finished (its record with it)
            self._seen({pause.id: None})
            self._follow_step()
        elif isinstance(answer, ENGINE_FAILURES):
            self.m.failed(f"follow {self.m.name}", answer)
            self.m.finish()
        else:
            self.m.state = "taking-over"  # no record by now: nobody drains it
            self.take_over(None, own_deadline=False)

    def _owner_alive(self, answer: OwnerState | EngineFailure) -> None:
        record = self._owner_record
        assert record is not None and self.m.pause is not None
        if self._owner_dead(record, answer.alive if isinstance(answer, OwnerState) else None):
            self._owner_record = None  # read it afresh: another follower may have taken over
            self.m.do(("follow", ""), ReadClaim(self.m.pause), self._owner_read)
        else:
            self._owner_checked()

    def _owner_checked(self) -> None:
        self._check_at = self.m.now + self.m.timings.follow.longest
        self._follow_step()

    def _owner_dead(self, record: ClaimRecord, alive: bool | None) -> bool:
        """Gone from this host; or stuck (or unknowable, on another host) past every bound of
        its own drain."""
        return alive is False or self.m.wall >= record.deadline + self.m.timings.owner_bound

    def take_over(self, stale: ClaimRecord | None, *, own_deadline: bool) -> None:
        """Claim a drain whose owner died (or that nobody holds: ``own_deadline``, an engine
        that cannot pause); the last writer wins."""
        pause = self.m.pause
        assert pause is not None
        if stale is not None:
            self.m.signalled.update(stale.signalled)
        refs = tuple(t.ref for t in self.m.tracked)

        def signalled(answer: frozenset[str] | EngineFailure) -> None:
            if not isinstance(answer, ENGINE_FAILURES):  # (else: the record alone says)
                self.m.signalled.update(answer)
            self.m.record = new_record(
                self.m.me,
                started=self.m.wall,
                grace=self.m.books.grace,
                signalled=tuple(sorted(self.m.signalled)),
            )
            self.m.do(("takeover", ""), WriteClaim(pause, self.m.record), written)

        def written(answer: Done | EngineFailure) -> None:
            if isinstance(answer, WorkloadNotFound):
                self.m.record = None  # the pause is gone: nothing to claim any more
            at = self.m.now + self.m.timings.takeover_settle
            self.m.wake(("takeover", ""), at, settled)

        def settled(_: Fired) -> None:
            self.m.do(("takeover", ""), ReadClaim(pause), read_back)

        def read_back(answer: ClaimSeen | EngineFailure) -> None:
            now_held = answer.record if isinstance(answer, ClaimSeen) else None
            mine = self.m.record
            if mine is None or (now_held is not None and now_held.token != mine.token):
                self.m.record = None  # another follower's: follow it
                self.m.state = "following"
                self._follow_step()
                return
            self.m.record_written = True
            books = self.m.books
            # a full grace from the takeover on (or, holding a drain nobody held, its own)
            books.deadline = (books.started if own_deadline else self.m.now) + books.grace
            self.m.owner = True
            self._drain()

        self.m.do(("takeover", ""), SignalledBefore(pause, refs), signalled)
