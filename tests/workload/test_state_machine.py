"""The controller under any sequence of calls (hypothesis): its counts and states stay coherent."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from asyncdeploy.workload import (
    Admission,
    DrainController,
    DrainState,
    PropagationWindow,
    RequestOutcome,
)

_ORDER = [DrainState.STARTING, DrainState.SERVING, DrainState.DRAINING, DrainState.STOPPED]


class ControllerMachine(RuleBasedStateMachine):
    """Windows of 0 s or an hour with a 0 s quiet period, so nothing depends on the clock:
    a failed probe closes the window at the next look, only the maximum or a probe can."""

    def __init__(self) -> None:
        super().__init__()
        self.controller = DrainController(
            propagation=PropagationWindow(max_seconds=3600, quiet_seconds=0)
        )
        self.open: list[Admission] = []
        self.refused_since_closed = False
        self.highest = 0

    @rule()
    def start(self) -> None:
        self.controller.mark_started()

    @rule(refuse=st.booleans())
    def drain(self, refuse: bool) -> None:
        self.controller.begin_drain(propagation=0 if refuse else None)

    @rule()
    def admit(self) -> None:
        accepting = self.controller.accepting
        admission = self.controller.try_admit()
        assert (admission is not None) == accepting
        if admission is not None:
            self.open.append(admission)

    @precondition(lambda self: self.open)
    @rule(index=st.integers(0, 100), outcome=st.sampled_from(RequestOutcome))
    def release(self, index: int, outcome: RequestOutcome) -> None:
        admission = self.open.pop(index % len(self.open))
        assert admission.release(outcome)
        assert not admission.release(outcome)  # exactly once

    @rule()
    def probe(self) -> None:
        ready = self.controller.check_ready()
        assert ready == (self.controller.state is DrainState.SERVING)

    @rule()
    def cut(self) -> None:
        self.controller.cut("test")

    @rule()
    def stop(self) -> None:
        self.controller.mark_stopped()

    @invariant()
    def coherent(self) -> None:
        stats = self.controller.statistics()
        position = _ORDER.index(stats.state)
        assert position >= self.highest  # states only move forward
        self.highest = position
        assert stats.in_flight == len(self.open)
        released = stats.completed + stats.cut_at_deadline + stats.client_disconnected
        assert stats.admitted == released + stats.failed + stats.in_flight
        assert stats.accepting == (
            stats.state is DrainState.SERVING
            or (stats.state is DrainState.DRAINING and stats.window_close_reason is None)
        )
        assert stats.drained == (
            stats.state in (DrainState.DRAINING, DrainState.STOPPED)
            and not stats.accepting
            and stats.in_flight == 0
        )
        if stats.window_close_reason is not None:
            self.refused_since_closed = True
        if self.refused_since_closed:
            assert not stats.accepting  # a closed window never reopens
        assert stats.admitted_while_draining <= stats.admitted


TestControllerMachine = ControllerMachine.TestCase
TestControllerMachine.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
