"""The end of a drain: kill what still runs, remove everything, the pause container last. Pure.

A state of :class:`~.core.WorkloadDrain`, entered at the deadline, when every pipeline
ended, or on the caller's kill request; bounded by ``cleanup_timeout``. Each container is
removed once its end is seen; the pause container is killed once nothing else runs (its network
teardown overlaps their removals; grace 0: at once, with them) and removed last (it holds the
namespaces the others share: removing it first SIGKILLs them on Docker and is refused by
Podman); then the volumes, then this drain's claim record. A container's summary says what the
engine saw: ``killed`` only for an exit the kill caused (137); one that ended on its own as the
kill landed is ``exited``, with its code.
"""

from __future__ import annotations

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, WorkloadConflict, WorkloadNotFound
from asyncdeploy._events import ContainerForceKilled
from asyncdeploy.drivers.engine._drain.context import DRAINED, DrainContext
from asyncdeploy.drivers.engine._drain.ends import Ends
from asyncdeploy.drivers.engine._drain.protocol import (
    SIGKILLED,
    Done,
    DropClaim,
    Exited,
    Fired,
    Kill,
    KillPause,
    Remove,
    RemoveVolumes,
    Sent,
    TrackedRef,
)
from asyncdeploy.drivers.engine._ops import ContainerRef

__all__ = ["Cleanup"]

#: How long to wait before asking again to remove a pause container held by a container made
#: after the drain's look (a create racing the delete, whose roll-back removes it).
PAUSE_HELD_RETRY = 0.5


class Cleanup:
    def __init__(self, m: DrainContext) -> None:
        self.m = m
        self.ends = Ends(m)
        self._kills: set[str] = set()
        self._removals: set[str] = set()
        self._pause_kill_done = False
        self._pause_removal = False

    def start(self) -> None:
        m = self.m
        m.cleanup_ends = m.now + m.timings.cleanup_timeout
        m.wake(("cleanup", ""), m.cleanup_ends, self._cleanup_timed_out)
        for ref in m.snapshot.containers:
            if ref.role not in DRAINED or ref.id in m.gone:
                continue
            t = m.tracked_ref(ref)
            if t is not None and t.outcome is None:
                self._kill(t)
            else:
                self._remove(ref)
        if m.books.grace == 0:
            self._kill_pause()  # nothing drains: it can die with them
        self._kills_ended()

    def _kill(self, t: TrackedRef) -> None:
        ref = t.ref
        reason = "deadline" if self.m.now >= self.m.books.deadline else "cancelled"
        self._kills.add(t.name)

        def sent(answer: Sent | EngineFailure) -> None:
            if isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"
            elif isinstance(answer, ENGINE_FAILURES):
                self.m.failed(f"kill {t.name}", answer)
            elif isinstance(answer, Sent):
                # Not delivered after the pause was killed: it died with its pause, by our hand.
                killed = answer.delivered or self.m.pause_killed
                if killed:
                    self.m.books.emit(ContainerForceKilled(**self.m.books.at(t), reason=reason))
                waited = self.m.now + self.m.timings.kill_wait
                self.m.wake(("killwait", t.name), waited, lambda fired: confirmed(fired, killed))
                end = lambda answer: confirmed(answer, killed)
                self.ends.killed(("killed", t.name), ref, answer.since, end)
                return
            self._killed(t)

        def confirmed(answer: Exited | EngineFailure | Fired, killed: bool) -> None:
            self.m.cancel([("killwait", t.name)])
            self.ends.cancel(("killed", t.name))
            if answer is Fired.FIRED:
                pass  # not seen within kill_wait: the summary says its end is unknown
            elif isinstance(answer, WorkloadNotFound):
                t.outcome = "missing"
            elif isinstance(answer, ENGINE_FAILURES):
                self.m.failed(f"kill {t.name}", answer)
            else:
                code = answer.code
                # "killed" only for a death the kill caused (137); an exit of its own before
                # the kill landed is told as the engine saw it: exited, with its code
                by_kill = killed and code in (SIGKILLED, None)
                self.m.exited(t, code, "killed" if by_kill else "exited")
            self._killed(t)

        self.m.do(("kill", t.name), Kill(ref), sent)

    def _killed(self, t: TrackedRef) -> None:
        self._kills.discard(t.name)
        self._remove(t.ref)
        self._kills_ended()

    def _kills_ended(self) -> None:
        if not self._kills:
            self._kill_pause()

    def _kill_pause(self) -> None:
        """SIGKILL the pause container, once (it has nothing to drain; removal comes last)."""
        pause = self.m.pause
        if self.m.pause_killed or pause is None or not pause.running or pause.id in self.m.gone:
            self._pause_kill_done = True
            self._removals_ended()
            return
        self.m.pause_killed = True

        def then(answer: Done | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.m.failed(f"kill {pause.name}", answer)
            self._pause_kill_done = True
            self._removals_ended()

        self.m.do(("killpause", ""), KillPause(pause), then)

    def _remove(self, ref: ContainerRef) -> None:
        self._removals.add(ref.name)

        def then(answer: Done | EngineFailure) -> None:
            self._removals.discard(ref.name)
            if ref.role == "pause" and self._held_by_a_late_container(answer):
                again = self.m.now + PAUSE_HELD_RETRY
                self.m.wake(("pauseheld", ""), again, lambda _: self._remove(ref))
                return
            if isinstance(answer, ENGINE_FAILURES) and not isinstance(answer, WorkloadNotFound):
                self.m.failed(f"remove {ref.name}", answer)
            else:  # a container gone already (by hand, or another delete) is no failure
                self.m.gone.add(ref.id)
                self.m.removed(ref)
            if ref.role == "pause":
                self._volumes()
            else:
                self._removals_ended()

        self.m.do(("remove", ref.name), Remove(ref), then)

    def _held_by_a_late_container(self, answer: Done | EngineFailure) -> bool:
        """The pause container's removal refused for its dependents (Podman) when every
        container this drain knew is gone: one made after the drain's look holds it (a create
        racing this delete: it finds its containers gone and removes what it made). Asked again
        while the clean-up's bound leaves time; past it, the refusal is the drain's error."""
        if not isinstance(answer, WorkloadConflict):
            return False
        m = self.m
        known = [ref for ref in m.snapshot.containers if ref.role != "pause"]
        time_left = m.cleanup_ends is not None and m.now + PAUSE_HELD_RETRY < m.cleanup_ends
        return time_left and all(ref.id in m.gone for ref in known)

    def _removals_ended(self) -> None:
        if self._kills or self._removals or not self._pause_kill_done or self._pause_removal:
            return
        self._pause_removal = True
        pause = self.m.pause
        if pause is not None and pause.id not in self.m.gone:
            self._remove(pause)  # last: it holds the namespaces the others share
        else:
            self._volumes()

    def _volumes(self) -> None:
        # a recreate keeps them: the next instance of the plan mounts them; and a workload
        # none of whose containers mounts a volume has none to look for
        if self.m.keep_volumes or self.m.snapshot.volumes is False:
            self._drop_claim()
            return

        def then(answer: Done | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES):
                self.m.failed("remove volumes", answer)
            self._drop_claim()

        self.m.do(("volumes", ""), RemoveVolumes(self.m.snapshot.volume_owner), then)

    def _drop_claim(self) -> None:
        if self.m.record is None or not self.m.record_written or self.m.pause is None:
            self.m.finish()
            return
        self.m.do(("dropclaim", ""), DropClaim(self.m.pause, self.m.record), self._claim_dropped)

    def _claim_dropped(self, _: Done | EngineFailure) -> None:
        self.m.finish()

    def _cleanup_timed_out(self, _: Fired) -> None:
        self.m.books.error(f"cleanup did not finish within {self.m.timings.cleanup_timeout:.0f} s")
        self.m.finish()
