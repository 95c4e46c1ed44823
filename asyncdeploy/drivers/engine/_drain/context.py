"""What one workload's drain knows and says, shared by the states of its machine. Pure.

:class:`DrainContext` holds the books (the clock, the deadline, the error lines, the events'
context), the containers and what is known of them (their ends, which are gone, which were
signalled), the claim record, and the command plumbing: an operation (``do``), a timer
(``wake``), a cancellation; each answer goes to the continuation it was asked with. The
machine (:mod:`.core`) is one, with the claim; its states (:mod:`.pipelines`,
:mod:`.follow`, :mod:`.cleanup`) are handed it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, cast

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, EngineUnavailable
from asyncdeploy._events import (
    ContainerEnd,
    ContainerExited,
    ContainerRemoved,
    DrainSummary,
    Event,
    PauseRemoved,
)
from asyncdeploy.drivers._books import DrainBooks
from asyncdeploy.drivers.engine._claim import ClaimRecord, Owner
from asyncdeploy.drivers.engine._drain.protocol import (
    Answer,
    Answers,
    Cancel,
    Command,
    Do,
    DrainTimings,
    EngineOp,
    Fired,
    Key,
    Remove,
    RemoveVolumes,
    Tell,
    Then,
    TrackedRef,
    Wake,
)
from asyncdeploy.drivers.engine._ops import (
    CallNotSent,
    CallUnanswered,
    ContainerRef,
    WorkloadSnapshot,
)

__all__ = ["DRAINED", "DrainContext", "gives_up"]

DRAINED = ("init", "run", "sidecar")  # the roles whose containers get a pipeline

A = TypeVar("A")


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


class DrainContext:
    """One workload's drain: what every state reads and writes (its books, the containers and
    what is known of them, the claim), and the commands they give. Pure."""

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
            if r.role in DRAINED
        ]
        self.pause = next((r for r in snapshot.containers if r.role == "pause"), None)
        self.state = "claiming"
        self.owner, self.cut, self.cleaning, self.lost = True, False, False, False
        self.unreachable_since: float | None = None
        self.gone: set[str] = set()  # ids of containers seen removed
        self.signalled: set[str] = set()  # names: stop signal sent, or about to be
        self.pause_killed = False
        self.cleanup_ends: float | None = None  # the clean-up's bound, once it has begun
        self.record: ClaimRecord | None = None  # this drain's, once it holds one
        self.record_written = False
        self.summary: DrainSummary | None = None
        # each key's continuation, typed by its operation at ``do`` (stored as taking any answer:
        # only its own operation's answer is ever given to it under its key)
        self._then: dict[Key, Callable[[Answer], None]] = {}
        # the operation outstanding under each key, when it was asked, and its retries' pauses
        self._asked: dict[Key, tuple[EngineOp, float, Iterator[float]]] = {}

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

    def _emit(self, event: Event) -> None:
        self._out.append(Tell(event))

    def _flush(self) -> list[Command]:
        out, self._out = self._out, []
        return out

    def do(self, key: Key, operation: Answers[A], then: Then[A]) -> None:
        """Carry out ``operation``; its answer (or the ``EngineError`` it raised) goes to
        ``then``, typed by the operation."""
        op = cast(EngineOp, operation)
        self._then[key] = cast(Callable[[Answer], None], then)
        self._asked[key] = (op, self.now, self.timings.engine_call.pauses())
        self._out.append(Do(key, op))

    def wake(self, key: Key, at: float, then: Callable[[Fired], None]) -> None:
        self._then[key] = cast(Callable[[Answer], None], then)
        self._asked.pop(key, None)
        self._out.append(Wake(key, at))

    def answer(self, key: Key, answer: Answer) -> None:
        """Give ``answer`` to the continuation waiting under ``key`` (none: it was
        cancelled, or replaced, meanwhile), unless it is a call lost with the connection that
        is tried again (:meth:`_retried`)."""
        asked = self._asked.pop(key, None)
        if asked is not None and self._retried(key, asked, answer):
            return
        then = self._then.pop(key, None)
        if then is not None:
            then(answer)

    def _retried(
        self, key: Key, asked: tuple[EngineOp, float, Iterator[float]], answer: Answer
    ) -> bool:
        """The engine's reachability, from an operation's answer, and whether the operation is
        asked again: a call lost with the connection is, after a pause, until the give-up rule
        says no more, unless it may have landed and must not land twice (a stop signal: its
        lost answer goes to its continuation, which knows what it means). A call the engine
        took and never answered (``CallUnanswered``) is not asked again: the engine is not
        answering, since the call went out."""
        op, asked_at, pauses = asked
        if not op.engine:
            return False
        if not isinstance(answer, ENGINE_FAILURES):
            self.reached()
            return False
        if isinstance(answer, CallUnanswered):
            self.unreachable(asked_at)
            return False
        if not isinstance(answer, EngineUnavailable):
            return False  # an answer, if not a good one
        if op.once and not isinstance(answer, CallNotSent):
            return False  # it may have landed
        self.unreachable(self.now)
        if self.gives_up(self.now):
            return False
        then = self._then.get(key)
        if then is None:
            return False  # cancelled meanwhile: nobody waits for it
        self._then[key] = lambda _: self._ask_again(key, op, then, pauses)
        self._out.append(Wake(key, self.now + next(pauses)))
        return True

    def _ask_again(
        self, key: Key, op: EngineOp, then: Callable[[Answer], None], pauses: Iterator[float]
    ) -> None:
        self._then[key] = then
        self._asked[key] = (op, self.now, pauses)
        self._out.append(Do(key, op))

    # the give-up rule for calls lost with the connection

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

    def call_bound(self, now: float, *, removal: bool = False) -> float:
        """How long one engine call may go unanswered from ``now``: to the deadline plus the
        call margin, and at least that margin. A loaded engine's removals queue behind one
        another, and so do looks at the containers being removed (Podman, forty workloads on
        two loaded cores: over 30 s): a ``removal`` in the clean-up may take to the end of the
        clean-up's bound, and a follower's calls to the end of the owner's (which begins by
        the deadline). Once the engine was given up on, the give-up margin alone."""
        if self.lost:
            return self.timings.give_up_after
        until = max(self.books.deadline, now) + self.timings.call_margin
        if removal and self.cleanup_ends is not None:
            until = max(until, self.cleanup_ends)
        elif self.state == "following":
            until = max(until, self.books.deadline + self.timings.cleanup_timeout)
        return until - now

    def bound_for(self, op: EngineOp) -> Callable[[float], float]:
        """The bound of a call carrying ``op``, from the time it is made (:meth:`call_bound`)."""
        removal = isinstance(op, Remove | RemoveVolumes)
        return lambda now: self.call_bound(now, removal=removal)

    def cancel(self, keys: Iterable[Key]) -> None:
        for key in list(keys):
            self._asked.pop(key, None)
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

    def tracked_ref(self, ref: ContainerRef) -> TrackedRef | None:
        return next((t for t in self.tracked if t.ref is ref), None)

    # --- claiming ----------------------------------------------------------------------------

    def exited(self, t: TrackedRef, exit_code: int | None, outcome: ContainerEnd) -> None:
        t.outcome, t.exit_code, t.seconds = outcome, exit_code, self.books.elapsed()
        self.books.emit(
            ContainerExited(**self.books.at(t), exit_code=exit_code, graceful=outcome != "killed")
        )

    def removed(self, ref: ContainerRef) -> None:
        tracked = self.tracked_ref(ref)
        if tracked is not None and tracked.outcome is None:
            tracked.outcome = "missing"
        event = PauseRemoved if ref.role == "pause" else ContainerRemoved
        self.books.emit(event(**self.books.at(), container=ref.name, role=ref.role))

    def finish(self) -> None:
        if self.summary is not None:
            return
        self.cleaning = True
        self.cancel(self._then)
        self.state = "done"
        unknown: ContainerEnd = "unreachable" if self.lost else "missing"
        self.summary = self.books.finish(self.tracked, unknown=unknown)
