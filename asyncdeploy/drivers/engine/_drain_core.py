"""One workload's engine drain as a state machine: observations in, commands out. Pure.

The machine is told what happened (an operation's answer, a timer that fired, the caller's kill
request, each with the time on the loop's clock) and says what to do next (an engine operation,
a timer, a cancellation, an event: :mod:`._drain_steps`); it never awaits and never calls the
engine, so every order and every fault is tested without one. The loop (:mod:`._drain_loop`)
carries the commands out over ``ContainerOps``.

Its states, in the order a drain meets them:

- **claiming**: the autoheal sidecar is removed (so it cannot resurrect a draining container)
  while the drain is claimed by pausing the pause container: one call, and the only one before
  the signals. A pause refused because it is paused already means another delete drains it.
- **draining** (the owner): one pipeline per init and run container, then per sidecar, under
  the one deadline: its ``pre_stop`` hook, its stop signal (once), the wait for its exit. A
  drain still running ``record_delay`` after its start records its claim (:mod:`._claim`).
- **following** (a second delete): it reports the exits and removals it sees and never
  signals, until the workload is gone; **taking over** when the owner is dead (its process gone,
  no record for ``record_wait``, or past its deadline plus ``owner_bound``): it records its own
  claim, checks after ``takeover_settle`` that no other follower's replaced it, then drains with
  a full grace from then on, except for the containers the dead owner had signalled.
- **cleaning**: at the deadline (or when every pipeline ended, or on the kill request), what
  still runs is SIGKILLed; each container is removed once its end is seen, the pause container
  last (it holds the namespaces), then the volumes; bounded by ``cleanup_timeout``.
- **done**: the summary, ``DrainFinished``.

A failing step is a line in the summary and the drain goes on; an engine unreachable past the
give-up rule (:func:`gives_up`) makes the containers whose end was not seen ``unreachable``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import attrs

from asyncdeploy.drivers._books import DrainBooks, TrackedContainer
from asyncdeploy.drivers.engine._claim import ClaimRecord, Owner, new_record
from asyncdeploy.drivers.engine._drain_steps import (
    AwaitExit,
    AwaitKilled,
    Cancel,
    Claim,
    ClaimSeen,
    Command,
    Do,
    DrainTimings,
    DropClaim,
    EngineCall,
    FollowLook,
    Hooked,
    Key,
    Kill,
    KillPause,
    LookPause,
    OwnerAlive,
    ReadClaim,
    Remove,
    RemoveSidecar,
    RemoveVolumes,
    Report,
    RunHook,
    Sent,
    Signal,
    SignalledBefore,
    Stop,
    Wake,
    WriteClaim,
)
from asyncdeploy.drivers.engine._ops import ContainerLook, ContainerRef, WorkloadSnapshot
from asyncdeploy.errors import (
    ENGINE_FAILURES,
    EngineFailure,
    EngineUnavailable,
    WorkloadNotFound,
)
from asyncdeploy.events import (
    ContainerEnd,
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainStarted,
    DrainSummary,
    Event,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
)

__all__ = ["SIGKILLED", "TrackedRef", "WorkloadDrain", "gives_up"]

SIGKILLED = 137
_DRAINED = ("init", "run", "sidecar")  # the roles whose containers get a pipeline

Then = Callable[[object], None]
_UNCONFIRMED = object()  # a kill whose effect was not seen within kill_wait


def gives_up(
    now: float, *, deadline: float, unreachable_since: float, cleaning: bool, after: float
) -> bool:
    """Whether a call lost with the connection is no longer tried again.

    Before the deadline the drain waits for the engine (a connection that blinks kills
    nothing), unless it is cleaning up early (the caller's "kill now"); then the engine gets
    ``after`` seconds from when it was lost. At or past the deadline it gets ``after`` seconds
    from the later of the deadline and the loss.
    """
    if now >= deadline:
        return now - max(unreachable_since, deadline) >= after
    return cleaning and now - unreachable_since >= after


@attrs.define(kw_only=True)
class TrackedRef(TrackedContainer):
    ref: ContainerRef


class WorkloadDrain:
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
    ) -> None:
        self.snapshot, self.timings, self.me = snapshot, timings, me
        self.kill_triggers_restart, self.keep_volumes = kill_triggers_restart, keep_volumes
        self.now, self.wall_offset = started, wall_started - started
        self._out: list[Command] = []
        self.books = DrainBooks(
            workload=snapshot.name,
            grace=grace,
            started=started,
            emit=self._emit,
            clock=lambda: self.now,
        )
        self.tracked = [
            TrackedRef(name=r.name, role=r.role, ref=r)
            for r in snapshot.containers
            if r.role in _DRAINED
        ]
        self.pause = next((r for r in snapshot.containers if r.role == "pause"), None)
        self.state = "claiming"
        self.owner, self.cut, self.cleaning, self.lost = True, False, False, False
        self.unreachable_since: float | None = None
        self.gone: set[str] = set()  # ids of containers seen removed
        self.signalled: set[str] = set()  # names: stop signal sent, or about to be
        self.pause_killed = False
        self.record: ClaimRecord | None = None  # this drain's, once it holds one
        self.record_written = False
        self.summary: DrainSummary | None = None
        self._then: dict[Key, Then] = {}
        self._opening: set[str] = set()  # what must end before the pipelines: sidecars, claim
        self._active: dict[str, str] = {}  # name → the step its pipeline is at
        self._wave: tuple[str, ...] = ()
        self._kills: set[str] = set()
        self._removals: set[str] = set()
        self._pause_kill_done = False
        self._pause_removal = False
        self._owner_record: ClaimRecord | None = None  # the owner's, as a follower read it
        self._check_at = math.inf  # when a follower next checks the owner
        self._polls = timings.follow_poll.pauses()
        self._poll = next(self._polls)
        self._fresh_at = -math.inf

    # --- the interface -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.snapshot.name

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def wall(self) -> float:
        return self.now + self.wall_offset

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
            if ref.role == "autoheal":
                self._opening.add(ref.name)
                self._do(("sidecar", ref.name), RemoveSidecar(ref), self._sidecar_removed(ref))
        self._opening.add("")
        self._claim()
        return self._flush()

    def observe(self, key: Key, answer: object, now: float) -> list[Command]:
        """An operation's answer (or None: a timer fired) under ``key``, at ``now``."""
        self.now = max(self.now, now)
        then = self._then.pop(key, None)
        if then is not None:
            then(answer)
        return self._flush()

    def kill(self, now: float) -> list[Command]:
        """The caller's kill request: what still runs is killed at once, and all removed."""
        self.now = max(self.now, now)
        if not self.cleaning:
            self.cut = True
            self._clean_up()
        return self._flush()

    # the carrier's give-up rule for calls lost with the connection
    def unreachable(self, now: float) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = now

    def reached(self) -> None:
        self.unreachable_since = None

    def gives_up(self, now: float) -> bool:
        since = now if self.unreachable_since is None else self.unreachable_since
        return gives_up(
            now,
            deadline=self.books.deadline,
            unreachable_since=since,
            cleaning=self.cleaning,
            after=self.timings.give_up_after,
        )

    def call_bound(self, now: float) -> float:
        """How long one engine call may go unanswered from ``now``: to the deadline plus the
        call margin, and at least that margin."""
        return max(self.books.deadline, now) + self.timings.call_margin - now

    # --- commands ----------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self._out.append(Report(event))

    def _flush(self) -> list[Command]:
        out, self._out = self._out, []
        return out

    def _do(self, key: Key, operation: EngineCall, then: Then) -> None:
        self._then[key] = then
        self._out.append(Do(key, operation))

    def _wake(self, key: Key, at: float, then: Then) -> None:
        self._then[key] = then
        self._out.append(Wake(key, at))

    def _cancel(self, keys: Iterable[Key]) -> None:
        for key in list(keys):
            if self._then.pop(key, None) is not None:
                self._out.append(Cancel(key))

    def failed(self, what: str, exc: EngineFailure) -> None:
        if isinstance(exc, EngineUnavailable):
            if not self.lost:
                self.lost = True
                self.books.error(
                    f"engine unreachable for {self.timings.give_up_after:g} s past the "
                    f"deadline ({exc.message}); delete again once it answers"
                )
        else:
            self.books.error(f"{what}: {exc}")

    def _tracked(self, ref: ContainerRef) -> TrackedRef | None:
        return next((t for t in self.tracked if t.ref is ref), None)

    # --- claiming ----------------------------------------------------------------------------

    def _sidecar_removed(self, ref: ContainerRef) -> Then:
        def then(answer: object) -> None:
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.failed(f"remove {ref.name}", answer)
            else:
                self.gone.add(ref.id)
                self.books.emit(SidecarRemoved(**self.books.at(), container=ref.name))
            self._opened(ref.name)

        return then

    def _opened(self, part: str, *, owner: bool | None = None) -> None:
        if owner is not None:
            self.owner = owner
        self._opening.discard(part)
        if self._opening or self.cleaning:
            return
        if self.owner:
            self._drain()
        else:
            self._follow()

    def _claim(self) -> None:
        pause = self.pause
        if pause is None or self.books.grace == 0:
            self._opened("", owner=True)  # grace 0 kills at once: no drain to protect
        elif pause.paused:
            self._opened("", owner=False)
        elif not pause.running:  # killed in another delete's cleanup: its record tells
            self._do(("claim", ""), ReadClaim(pause), self._claim_read)
        else:
            self._do(("claim", ""), Claim(pause), self._claimed)

    def _claim_read(self, answer: object) -> None:
        held = isinstance(answer, ClaimSeen) and answer.record is not None
        self._opened("", owner=not held)

    def _claimed(self, answer: object) -> None:
        pause = self.pause
        assert pause is not None
        if answer is True:
            started = self.books.started + self.wall_offset  # the owner's deadline, in its record
            self.record = new_record(self.me, started=started, grace=self.books.grace)
            self._opened("", owner=True)
        elif answer is False:  # refused: paused by another delete, or not running
            self._do(("claim", ""), LookPause(pause), self._pause_looked)
        elif isinstance(answer, WorkloadNotFound):
            self._opened("", owner=True)  # gone: nothing to claim
        elif isinstance(answer, EngineUnavailable):
            self.failed(f"claim the drain of {self.name}", answer)
            self._opened("", owner=True)
        else:  # an engine that cannot pause (no cgroup freezer): the record alone decides
            self._do(("claim", ""), ReadClaim(pause), self._claim_by_record)

    def _pause_looked(self, answer: object) -> None:
        if isinstance(answer, EngineUnavailable):
            self.failed(f"claim the drain of {self.name}", answer)
        paused = isinstance(answer, ContainerLook) and answer.paused
        self._opened("", owner=not paused)

    def _claim_by_record(self, answer: object) -> None:
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
        self._opening.discard("")
        self.state = "taking-over"
        self._take_over(found, own_deadline=True)

    # --- draining (the owner) ----------------------------------------------------------------

    def _drain(self) -> None:
        self.state = "draining"
        if self.books.grace == 0:
            self._clean_up()
            return
        self._wake(("deadline", ""), self.books.deadline, lambda _: self._clean_up())
        if self.record is not None and not self.record_written:
            at = self.books.started + self.timings.record_delay
            self._wake(("record", ""), at, lambda _: self._write_record())
        self._start_wave(("init", "run"))

    def _start_wave(self, roles: tuple[str, ...]) -> None:
        self._wave = roles
        for t in self.tracked:
            if t.outcome is None and t.role in roles:
                self._pipeline(t)
        self._wave_ended()

    def _wave_ended(self) -> None:
        if self._active or self.cleaning:
            return
        if self._wave == ("init", "run"):
            self._start_wave(("sidecar",))  # sidecars (a proxy, the gate) once the others ended
        else:
            self._clean_up()  # every pipeline ended before the deadline

    def _step(self, t: TrackedRef, step: str, operation: EngineCall, then: Then) -> None:
        self._active[t.name] = step
        self._do((step, t.name), operation, then)

    def _pipeline_ended(self, t: TrackedRef) -> None:
        self._active.pop(t.name, None)
        self._wave_ended()

    def _pipeline(self, t: TrackedRef) -> None:
        """One container's way out: its hook, then its signal, then its exit. A container a
        dead owner signalled already (a takeover) is only waited for."""
        ref = t.ref
        if t.name in self.signalled:
            wait = AwaitExit(ref, since=-1, before_stream=True)
            self._step(t, "exit", wait, self._ended(t, delivered=True))
        elif ref.pre_stop or ref.pre_stop_http:
            self.books.emit(PreStopStarted(**self.books.at(t)))
            self._step(t, "hook", RunHook(ref, self.pause), self._hooked(t))
        else:
            self._stop(t)

    def _hooked(self, t: TrackedRef) -> Then:
        def then(answer: object) -> None:
            hooked = answer if isinstance(answer, Hooked) else Hooked(None, True)
            if hooked.error is not None:
                self.books.error(f"pre_stop of {t.name}: {hooked.error}")
            self._hook_finished(t, hooked.exit_code, timed_out=False)
            self._stop(t)

        return then

    def _hook_finished(self, t: TrackedRef, exit_code: int | None, *, timed_out: bool) -> None:
        self.books.emit(
            PreStopFinished(**self.books.at(t), exit_code=exit_code, timed_out=timed_out)
        )

    def _stop(self, t: TrackedRef) -> None:
        ref = t.ref
        self.signalled.add(t.name)
        if ref.restart_policy != "no" and self.kill_triggers_restart:
            # Podman restarts a killed container under its policy: its stop call does not
            self._signal_sent(t)
            stop = Stop(ref, self.books.deadline - self.now)
            self._step(t, "exit", stop, self._ended(t, delivered=True))
        else:
            self._step(t, "signal", Signal(ref), self._sent(t))

    def _sent(self, t: TrackedRef) -> Then:
        def then(answer: object) -> None:
            if not isinstance(answer, Sent):
                self._ended(t, delivered=True)(answer)
                return
            ref = t.ref
            if answer.delivered:
                self._signal_sent(t)
                restartable = ref.restart_policy != "no"
                wait = AwaitExit(ref, answer.since, answer.before_stream, restartable)
            else:  # it was not running: its exit, as the engine tells it
                wait = AwaitExit(ref, answer.since, answer.before_stream, wait_only=True)
            self._step(t, "exit", wait, self._ended(t, delivered=answer.delivered))

        return then

    def _signal_sent(self, t: TrackedRef) -> None:
        self.books.emit(SignalSent(**self.books.at(t), signal=t.ref.stop_signal))

    def _ended(self, t: TrackedRef, *, delivered: bool) -> Then:
        def then(answer: object) -> None:
            if isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"  # removed by hand, or by another delete: not a failure
            elif isinstance(answer, ENGINE_FAILURES):
                self.failed(f"stop {t.name}", answer)
            else:
                # Not running at the signal: ended by its hook (a drain step), else on its own.
                ended_by_us = delivered or bool(t.ref.pre_stop or t.ref.pre_stop_http)
                self._exited(t, _code(answer), "exited" if ended_by_us else "already-exited")
            self._pipeline_ended(t)

        return then

    def _exited(self, t: TrackedRef, exit_code: int | None, outcome: ContainerEnd) -> None:
        t.outcome, t.exit_code, t.seconds = outcome, exit_code, self.books.elapsed()
        self.books.emit(
            ContainerExited(**self.books.at(t), exit_code=exit_code, graceful=outcome != "killed")
        )

    def _write_record(self) -> None:
        """Book-keeping after the signals: the claim record, once, if the drain (its removals
        included) is not over."""
        pause = self.pause
        if pause is None or self.finished:
            return
        assert self.record is not None
        self.record = attrs.evolve(self.record, signalled=tuple(sorted(self.signalled)))
        self._do(("record", ""), WriteClaim(pause, self.record), self._recorded)

    def _recorded(self, answer: object) -> None:
        self.record_written = not isinstance(answer, ENGINE_FAILURES)

    # --- following, taking over ---------------------------------------------------------------

    def _follow(self) -> None:
        """Follow until the workload is gone. The owner is first checked once the drain has
        been followed ``record_wait`` (most are over by then: no read at all); a live owner's
        record is not read again, only whether its process lives (no engine call)."""
        self.state = "following"
        self._check_at = self.now + self.timings.record_wait
        # No look at first: the exit stream tells (a burst of looks by every follower would
        # compete with the owners' signals); one look follow_catch_up in, then rarely (and at
        # every step without a stream: the loop looks when it has nothing else to go by)
        self._fresh_at = self.now + self.timings.follow_catch_up - self.timings.follow_look_every
        self._follow_step()

    def _follow_step(self) -> None:
        refs = tuple(r for r in self.snapshot.containers if r.id not in self.gone)
        fresh = self.now - self._fresh_at >= self.timings.follow_look_every
        if fresh:
            self._fresh_at = self.now
        look = FollowLook(refs, fresh=fresh, since=0, until=self.now + self._poll)
        self._poll = next(self._polls)
        self._do(("follow", ""), look, self._followed)

    def _followed(self, answer: object) -> None:
        if isinstance(answer, ENGINE_FAILURES):
            self.failed(f"follow {self.name}", answer)
            self._finish()
            return
        assert isinstance(answer, dict)
        self._seen(answer)
        if all(r.id in self.gone for r in self.snapshot.containers):
            self._finish()
        elif self.pause is None or self.pause.id in self.gone or self.now < self._check_at:
            self._follow_step()
        elif self._owner_record is None:
            self._do(("follow", ""), ReadClaim(self.pause), self._owner_read)
        else:
            self._do(("follow", ""), OwnerAlive(self._owner_record.owner), self._owner_alive)

    def _seen(self, looks: dict[str, ContainerLook | None]) -> None:
        for ref in self.snapshot.containers:
            if ref.id in self.gone or ref.id not in looks:
                continue
            look, tracked = looks[ref.id], self._tracked(ref)
            if look is None:
                self.gone.add(ref.id)
                if ref.role != "autoheal":
                    self._removed(ref)
            elif tracked is not None and tracked.outcome is None and not look.running:
                code = look.exit_code
                self._exited(tracked, code, "killed" if code == SIGKILLED else "exited")

    def _owner_read(self, answer: object) -> None:
        if isinstance(answer, ENGINE_FAILURES):
            self.failed(f"follow {self.name}", answer)
            self._finish()
            return
        seen = answer if isinstance(answer, ClaimSeen) else ClaimSeen(None, None)
        record = seen.record
        if record is None or self._owner_dead(record, seen.owner_alive):
            self.state = "taking-over"  # no record by now: nobody drains it
            self._take_over(record, own_deadline=False)
        else:
            self._owner_record = record
            self._owner_checked()

    def _owner_alive(self, answer: object) -> None:
        record = self._owner_record
        assert record is not None and self.pause is not None
        if self._owner_dead(record, answer if isinstance(answer, bool) else None):
            self._owner_record = None  # read it afresh: another follower may have taken over
            self._do(("follow", ""), ReadClaim(self.pause), self._owner_read)
        else:
            self._owner_checked()

    def _owner_checked(self) -> None:
        self._check_at = self.now + self.timings.follow_poll.longest
        self._follow_step()

    def _owner_dead(self, record: ClaimRecord, alive: bool | None) -> bool:
        """Gone from this host; or stuck (or unknowable, on another host) past every bound of
        its own drain."""
        return alive is False or self.wall >= record.deadline + self.timings.owner_bound

    def _take_over(self, stale: ClaimRecord | None, *, own_deadline: bool) -> None:
        """Claim a drain whose owner died (or that nobody holds: ``own_deadline``, an engine
        that cannot pause); the last writer wins."""
        pause = self.pause
        assert pause is not None
        if stale is not None:
            self.signalled.update(stale.signalled)
        refs = tuple(t.ref for t in self.tracked)

        def signalled(answer: object) -> None:
            if isinstance(answer, frozenset):
                self.signalled.update(answer)
            self.record = new_record(
                self.me,
                started=self.wall,
                grace=self.books.grace,
                signalled=tuple(sorted(self.signalled)),
            )
            self._do(("takeover", ""), WriteClaim(pause, self.record), written)

        def written(answer: object) -> None:
            if isinstance(answer, WorkloadNotFound):
                self.record = None  # the pause is gone: nothing to claim any more
            at = self.now + self.timings.takeover_settle
            self._wake(("takeover", ""), at, lambda _: settled())

        def settled() -> None:
            self._do(("takeover", ""), ReadClaim(pause), read_back)

        def read_back(answer: object) -> None:
            now_held = answer.record if isinstance(answer, ClaimSeen) else None
            mine = self.record
            if mine is None or (now_held is not None and now_held.token != mine.token):
                self.record = None  # another follower's: follow it
                self.state = "following"
                self._follow_step()
                return
            self.record_written = True
            books = self.books
            # a full grace from the takeover on (or, holding a drain nobody held, its own)
            books.deadline = (books.started if own_deadline else self.now) + books.grace
            self.owner = True
            self._drain()

        self._do(("takeover", ""), SignalledBefore(pause, refs), signalled)

    # --- cleaning ----------------------------------------------------------------------------

    def _clean_up(self) -> None:
        """Kill what still runs and remove everything, once; a cut follower kills too: the
        caller asked to kill now."""
        if self.cleaning:
            return
        self.cleaning = True
        for hooked in self.tracked:
            if self._active.get(hooked.name) == "hook":  # cut off: no code, and no error
                self._hook_finished(hooked, None, timed_out=True)
        self._active.clear()
        self._cancel(k for k in self._then if k != ("record", ""))  # the record still tells
        if self.cut:
            self.owner = True
        if not self.owner:
            self._finish()
            return
        self.state = "cleaning"
        bound = self.now + self.timings.cleanup_timeout
        self._wake(("cleanup", ""), bound, lambda _: self._cleanup_timed_out())
        for ref in self.snapshot.containers:
            if ref.role not in _DRAINED or ref.id in self.gone:
                continue
            t = self._tracked(ref)
            if t is not None and t.outcome is None:
                self._kill(t)
            else:
                self._remove(ref)
        if self.books.grace == 0:
            self._kill_pause()  # nothing drains: it can die with them
        self._kills_ended()

    def _kill(self, t: TrackedRef) -> None:
        ref = t.ref
        reason = "deadline" if self.now >= self.books.deadline else "cancelled"
        self._kills.add(t.name)

        def sent(answer: object) -> None:
            if isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"
            elif isinstance(answer, ENGINE_FAILURES):
                self.failed(f"kill {t.name}", answer)
            elif isinstance(answer, Sent):
                # Not delivered after the pause was killed: it died with its pause, by our hand.
                killed = answer.delivered or self.pause_killed
                if killed:
                    self.books.emit(ContainerForceKilled(**self.books.at(t), reason=reason))
                waited = self.now + self.timings.kill_wait
                self._wake(("killwait", t.name), waited, lambda _: confirmed(_UNCONFIRMED, killed))
                wait = AwaitKilled(ref, answer.since)
                self._do(("killed", t.name), wait, lambda answer: confirmed(answer, killed))
                return
            self._killed(t)

        def confirmed(answer: object, killed: bool) -> None:
            self._cancel([("killwait", t.name), ("killed", t.name)])
            if answer is _UNCONFIRMED:
                pass  # its end never seen: the summary says it is unknown
            elif isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"
            elif isinstance(answer, ENGINE_FAILURES):
                self.failed(f"kill {t.name}", answer)
            else:
                code = _code(answer)
                # "killed" only for a death the kill caused (137); an exit of its own before
                # the kill landed is told as the engine saw it: exited, with its code
                by_kill = killed and code in (SIGKILLED, None)
                self._exited(t, code, "killed" if by_kill else "exited")
            self._killed(t)

        self._do(("kill", t.name), Kill(ref), sent)

    def _killed(self, t: TrackedRef) -> None:
        self._kills.discard(t.name)
        self._remove(t.ref)
        self._kills_ended()

    def _kills_ended(self) -> None:
        if not self._kills:
            self._kill_pause()

    def _kill_pause(self) -> None:
        """SIGKILL the pause container, once (it has nothing to drain; removal comes last)."""
        pause = self.pause
        if self.pause_killed or pause is None or not pause.running or pause.id in self.gone:
            self._pause_kill_done = True
            self._removals_ended()
            return
        self.pause_killed = True

        def then(answer: object) -> None:
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.failed(f"kill {pause.name}", answer)
            self._pause_kill_done = True
            self._removals_ended()

        self._do(("killpause", ""), KillPause(pause), then)

    def _remove(self, ref: ContainerRef) -> None:
        self._removals.add(ref.name)

        def then(answer: object) -> None:
            self._removals.discard(ref.name)
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.failed(f"remove {ref.name}", answer)
            else:  # a container gone already (by hand, or another delete) is no failure
                self.gone.add(ref.id)
                self._removed(ref)
            if ref.role == "pause":
                self._volumes()
            else:
                self._removals_ended()

        self._do(("remove", ref.name), Remove(ref), then)

    def _removals_ended(self) -> None:
        if self._kills or self._removals or not self._pause_kill_done or self._pause_removal:
            return
        self._pause_removal = True
        pause = self.pause
        if pause is not None and pause.id not in self.gone:
            self._remove(pause)  # last: it holds the namespaces the others share
        else:
            self._volumes()

    def _volumes(self) -> None:
        # a recreate keeps them: the next instance of the plan mounts them; and a workload
        # none of whose containers mounts a volume has none to look for
        if self.keep_volumes or self.snapshot.volumes is False:
            self._drop_claim()
            return

        def then(answer: object) -> None:
            if isinstance(answer, ENGINE_FAILURES):
                self.failed("remove volumes", answer)
            self._drop_claim()

        self._do(("volumes", ""), RemoveVolumes(self.snapshot.volume_owner), then)

    def _drop_claim(self) -> None:
        if self.record is None or not self.record_written or self.pause is None:
            self._finish()
            return
        self._do(("dropclaim", ""), DropClaim(self.pause, self.record), lambda _: self._finish())

    def _cleanup_timed_out(self) -> None:
        self.books.error(f"cleanup did not finish within {self.timings.cleanup_timeout:.0f} s")
        self._finish()

    def _removed(self, ref: ContainerRef) -> None:
        tracked = self._tracked(ref)
        if tracked is not None and tracked.outcome is None:
            tracked.outcome = "missing"
        event = PauseRemoved if ref.role == "pause" else ContainerRemoved
        self.books.emit(event(**self.books.at(), container=ref.name, role=ref.role))

    def _finish(self) -> None:
        if self.summary is not None:
            return
        self.cleaning = True
        self._cancel(self._then)
        self.state = "done"
        unknown: ContainerEnd = "unreachable" if self.lost else "missing"
        self.summary = self.books.finish(self.tracked, unknown=unknown)


def _code(answer: object) -> int | None:
    return answer if isinstance(answer, int) and not isinstance(answer, bool) else None
