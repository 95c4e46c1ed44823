"""What one workload's drain knows and says, shared by the states of its machine. Pure.

:class:`DrainContext` holds the books (the clock, the deadline, the error lines, the events'
context), the containers and what is known of them (their ends, which are gone, which were
signalled), the claim record, and the command plumbing: an operation (``do``), a timer
(``wake``), a cancellation; each answer goes to the continuation it was asked with. The
machine (:mod:`.core`) is one, with the claim; its states (:mod:`.pipelines`,
:mod:`.follow`, :mod:`.cleanup`) are handed it.
"""

from __future__ import annotations

from collections.abc import Iterable

from asyncdeploy._errors import EngineFailure, EngineUnavailable
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
    Cancel,
    Command,
    Do,
    DrainTimings,
    EngineOp,
    Key,
    Tell,
    Then,
    TrackedRef,
    Wake,
)
from asyncdeploy.drivers.engine._ops import ContainerRef, WorkloadSnapshot

__all__ = ["DRAINED", "DrainContext"]

DRAINED = ("init", "run", "sidecar")  # the roles whose containers get a pipeline


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
        self.record: ClaimRecord | None = None  # this drain's, once it holds one
        self.record_written = False
        self.summary: DrainSummary | None = None
        self._then: dict[Key, Then] = {}

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

    def do(self, key: Key, operation: EngineOp, then: Then) -> None:
        self._then[key] = then
        self._out.append(Do(key, operation))

    def wake(self, key: Key, at: float, then: Then) -> None:
        self._then[key] = then
        self._out.append(Wake(key, at))

    def cancel(self, keys: Iterable[Key]) -> None:
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
