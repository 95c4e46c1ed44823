"""The owner's drain: one pipeline per container under the one deadline. Pure.

A state of :class:`~.core.WorkloadDrain` (its books, its commands): init and run
containers first, each its ``pre_stop`` hook (one that fails goes straight on; a hung one holds
back its own container only), its stop signal (once), the wait for its exit; then the sidecars
(a proxy, the drain gate), once the others ended. Book-keeping comes after the signals: the
claim record, written once ``record_delay`` in if the drain is not over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard, TypeVar

import attrs

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, EngineUnavailable, WorkloadNotFound
from asyncdeploy._events import PreStopFinished, PreStopStarted, SignalSent
from asyncdeploy.drivers.engine._drain.context import DrainContext
from asyncdeploy.drivers.engine._drain.ends import Ends
from asyncdeploy.drivers.engine._drain.protocol import (
    Answer,
    Answers,
    AwaitExit,
    Done,
    Exited,
    Fired,
    Hooked,
    Look,
    NoStream,
    RunHook,
    Sent,
    Signal,
    Stop,
    StreamExit,
    Then,
    TrackedRef,
    WriteClaim,
)
from asyncdeploy.drivers.engine._ops import CallNotSent, ContainerLook, ContainerRef

__all__ = ["OwnerDrain"]

A = TypeVar("A")


def _lost_answer(answer: Answer) -> TypeGuard[EngineUnavailable]:
    """A call's answer lost with the connection, when the call may have landed (not one that
    surely never reached the engine)."""
    return isinstance(answer, EngineUnavailable) and not isinstance(answer, CallNotSent)


def _refused(answer: Answer) -> TypeGuard[EngineFailure]:
    """An engine failure that is an answer (a refusal, a 500), not a lost connection (given
    up on: the engine is unreachable) nor a container gone (removed: its end)."""
    return isinstance(answer, ENGINE_FAILURES) and not isinstance(
        answer, EngineUnavailable | WorkloadNotFound
    )


class OwnerDrain:
    def __init__(self, m: DrainContext, *, clean_up: Callable[[], None]) -> None:
        self.m = m
        self.ends = Ends(m)
        self._clean_up = clean_up  # the next state
        self._active: dict[str, str] = {}  # name → the step its pipeline is at
        self._wave: tuple[str, ...] = ()

    def cut(self) -> None:
        """The drain is over (deadline, kill, every pipeline ended): a hook still running was
        cut off, with no exit code and no error."""
        for hooked in self.m.tracked:
            if self._active.get(hooked.name) == "hook":
                self._hook_finished(hooked, None, timed_out=True)
        self._active.clear()

    def start(self) -> None:
        """Drain as the owner: the deadline, the record's timer, the first wave."""
        self.m.state = "draining"
        if self.m.books.grace == 0:
            self._clean_up()
            return
        self.m.wake(("deadline", ""), self.m.books.deadline, self._deadline)
        at = self.m.books.started + self.m.timings.record_delay
        if self.m.record is not None and not self.m.record_written:
            self.m.wake(("record", ""), at, self._write_record)

        self._start_wave(("init", "run"))

    def _deadline(self, _: Fired) -> None:
        self._clean_up()

    def _start_wave(self, roles: tuple[str, ...]) -> None:
        self._wave = roles
        for t in self.m.tracked:
            if t.outcome is None and t.role in roles:
                self._pipeline(t)
        self._wave_ended()

    def _wave_ended(self) -> None:
        if self._active or self.m.cleaning:
            return
        if self._wave == ("init", "run"):
            self._start_wave(("sidecar",))  # sidecars (a proxy, the gate) once the others ended
        else:
            self._clean_up()  # every pipeline ended before the deadline

    def _step(self, t: TrackedRef, step: str, operation: Answers[A], then: Then[A]) -> None:
        self._active[t.name] = step
        self.m.do((step, t.name), operation, then)

    def _await(self, t: TrackedRef, wait: AwaitExit, then: Then[Exited]) -> None:
        self._active[t.name] = "exit"
        self.ends.exit(("exit", t.name), wait, then)

    def _pipeline_ended(self, t: TrackedRef) -> None:
        self._active.pop(t.name, None)
        self._wave_ended()

    def _pipeline(self, t: TrackedRef) -> None:
        """One container's way out: its hook, then its signal, then its exit. A container a
        dead owner signalled already (a takeover) is only waited for."""
        ref = t.ref
        if t.name in self.m.signalled:
            wait = AwaitExit(ref, since=-1, before_stream=True)
            self._await(t, wait, self._ended(t, delivered=True))
        elif ref.pre_stop or ref.pre_stop_http:
            window = _window(ref, "pre_stop")
            self.m.books.emit(PreStopStarted(**self.m.books.at(t), propagation_seconds=window))
            self._step(t, "hook", RunHook(ref, self.m.pause), self._hooked(t))
            if ref.pre_stop and (ref.pre_stop_http is None or self.m.pause is None):
                # An exec: a container that dies during it ends it (failed, no code): Docker
                # leaves the exec's stream open when the container is restarted meanwhile,
                # and the hook would hold the signal until the deadline.
                self.m.do(("hookdeath", t.name), StreamExit(ref), self._died_in_hook(t))
        else:
            self._stop(t)

    def _died_in_hook(self, t: TrackedRef) -> Then[Exited | NoStream]:
        def then(answer: Exited | NoStream | EngineFailure) -> None:
            if isinstance(answer, Exited):
                self.m.cancel([("hook", t.name)])
                self._hooked(t)(Hooked(None, True))
            # else no stream to tell: the hook alone decides

        return then

    def _hooked(self, t: TrackedRef) -> Then[Hooked]:
        def then(answer: Hooked | EngineFailure) -> None:
            self.m.cancel([("hookdeath", t.name)])
            hooked = answer if isinstance(answer, Hooked) else Hooked(None, True)
            if hooked.error is not None:
                self.m.books.error(f"pre_stop of {t.name}: {hooked.error}")
            self._hook_finished(t, hooked.exit_code, timed_out=False)
            self._stop(t)

        return then

    def _hook_finished(self, t: TrackedRef, exit_code: int | None, *, timed_out: bool) -> None:
        self.m.books.emit(
            PreStopFinished(**self.m.books.at(t), exit_code=exit_code, timed_out=timed_out)
        )

    def _stop(self, t: TrackedRef) -> None:
        ref = t.ref
        self.m.signalled.add(t.name)
        if ref.restart_policy != "no" and self.m.kill_triggers_restart:
            # Podman restarts a killed container under its policy: its stop call does not
            self._signal_sent(t)
            stop = Stop(ref, self.m.books.deadline - self.m.now)
            self._step(t, "exit", stop, self._stopped(t))
        else:
            self._step(t, "signal", Signal(ref), self._sent(t))

    def _stopped(self, t: TrackedRef) -> Then[Exited]:
        def then(answer: Exited | EngineFailure) -> None:
            if _lost_answer(answer):  # it stops all the same: its end, as the engine tells it
                wait = AwaitExit(t.ref, since=-1, before_stream=False, wait_only=True)
                self._await(t, wait, self._ended(t, delivered=True))
                return
            self._ended(t, delivered=True)(answer)

        return then

    def _sent(self, t: TrackedRef, first: Sent | None = None) -> Then[Sent]:
        """The stop signal's answer. Sent once: a lost answer is taken as delivered (it may
        have landed); refused as not running while its restart policy runs it again (Docker
        refuses a kill while it restarts), it is sent again once a look sees it running."""

        def then(answer: Sent | EngineFailure) -> None:
            if _lost_answer(answer):
                # An exit before now is not in the stream's count: a look, once it is open
                answer = Sent(True, since=-1, before_stream=True)
            if isinstance(answer, Sent) and first is not None:
                answer = attrs.evolve(first, delivered=answer.delivered)  # the first mark counts
            if _refused(answer):
                # The engine refused the signal (not a lost connection, not a container gone):
                # it may run on, undrained. Its end is waited for, the deadline's to force.
                self.m.failed(f"stop {t.name}", answer)
                wait = AwaitExit(t.ref, since=-1, before_stream=True)
                self._await(t, wait, self._ended(t, delivered=True))
                return
            if not isinstance(answer, Sent):  # lost, or gone: its end, as a wait would say
                self._ended(t, delivered=True)(answer)
                return
            ref = t.ref
            if not answer.delivered and ref.restart_policy != "no":
                self._step(t, "signal", Look(ref), self._restarting(t, answer))
                return
            if answer.delivered:
                self._signal_sent(t)
                restartable = ref.restart_policy != "no"
                wait = AwaitExit(ref, answer.since, answer.before_stream, restartable)
            else:  # it was not running: its exit, as the engine tells it
                wait = AwaitExit(ref, answer.since, answer.before_stream, wait_only=True)
            self._await(t, wait, self._ended(t, delivered=answer.delivered))

        return then

    def _restarting(self, t: TrackedRef, sent: Sent) -> Then[ContainerLook | None]:
        """A container with a restart policy the signal found not running: running again (it
        crashed in its hook and was restarted), it is signalled again after a pause; else its
        exit is waited for."""

        def then(answer: ContainerLook | EngineFailure | None) -> None:
            if isinstance(answer, ContainerLook) and answer.running:
                at = self.m.now + self.m.timings.restart.first
                self._active[t.name] = "signal"
                self.m.wake(("signal", t.name), at, lambda _: self._resignal(t, sent))
                return
            wait = AwaitExit(t.ref, sent.since, sent.before_stream, wait_only=True)
            self._await(t, wait, self._ended(t, delivered=False))

        return then

    def _resignal(self, t: TrackedRef, sent: Sent) -> None:
        self._step(t, "signal", Signal(t.ref), self._sent(t, first=sent))

    def _signal_sent(self, t: TrackedRef) -> None:
        window = _window(t.ref, "signal")
        self.m.books.emit(
            SignalSent(**self.m.books.at(t), signal=t.ref.stop_signal, propagation_seconds=window)
        )

    def _ended(self, t: TrackedRef, *, delivered: bool) -> Then[Exited]:
        def then(answer: Exited | EngineFailure) -> None:
            if isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"  # removed by hand, or by another delete: not a failure
            elif _refused(answer):
                # Its end cannot be told now: it is the deadline's (a kill before it would
                # turn a drain into a kill); the pipeline holds until then.
                self.m.failed(f"stop {t.name}", answer)
                self._active[t.name] = "held"
                return
            elif isinstance(answer, ENGINE_FAILURES):
                self.m.failed(f"stop {t.name}", answer)
            else:
                # Not running at the signal: ended by its hook (a drain step), else on its own.
                ended_by_us = delivered or bool(t.ref.pre_stop or t.ref.pre_stop_http)
                self.m.exited(t, answer.code, "exited" if ended_by_us else "already-exited")
            self._pipeline_ended(t)

        return then

    def _write_record(self, _: Fired) -> None:
        """Book-keeping after the signals: the claim record, once, if the drain (its removals
        included) is not over."""
        pause = self.m.pause
        if pause is None or self.m.finished:
            return
        assert self.m.record is not None
        self.m.record = attrs.evolve(self.m.record, signalled=tuple(sorted(self.m.signalled)))
        self.m.do(("record", ""), WriteClaim(pause, self.m.record), self._recorded)

    def _recorded(self, answer: Done | EngineFailure) -> None:
        self.m.record_written = not isinstance(answer, ENGINE_FAILURES)


def _window(ref: ContainerRef, during: str) -> float | None:
    """The propagation window ``ref`` holds in this step of its drain (its hook, or after its
    signal), for the events that begin the step; None when it holds none there."""
    if ref.propagation is None or ref.propagation[1] != during:
        return None
    return ref.propagation[0]
