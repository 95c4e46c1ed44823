"""The engine drain's core driven through interleavings (hypothesis): answers in any order and
at any time the loop could give them, failures, containers that die by themselves, the caller's
kill request, timers firing. Whatever the interleaving, the promises of docs/drain.md hold:

- every container's way out (its hook, or its stop signal) starts in one step, once the claim
  is answered: no container waits for another's call;
- the autoheal sidecar goes first (its removal is asked before any hook or signal), and the
  pause container last (its removal is asked once every other removal was answered);
- nothing is SIGKILLed before the deadline unless the caller asked to kill now;
- no stop signal is sent twice;
- one summary, naming each drained container once.

The loop's own contract is kept by the driver here: a timer fires at its time and not before,
no answer comes after a timer that is due, and a call lost with the connection (an
``EngineUnavailable`` answer) comes back only once the give-up rule allows it.
"""

from __future__ import annotations

import math

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncdeploy._errors import EngineAPIError, EngineUnavailable, WorkloadNotFound
from asyncdeploy._events import DrainFinished
from asyncdeploy.drivers.engine._claim import Owner
from asyncdeploy.drivers.engine._drain.core import WorkloadDrain
from asyncdeploy.drivers.engine._drain.protocol import (
    AwaitExit,
    AwaitKilled,
    Cancel,
    Claim,
    ClaimSeen,
    Command,
    Do,
    DrainTimings,
    FollowLook,
    Hooked,
    Key,
    Kill,
    LookPause,
    OwnerAlive,
    ReadClaim,
    Remove,
    RemoveSidecar,
    RunHook,
    Sent,
    Signal,
    SignalledBefore,
    Stop,
    Tell,
    Wake,
)
from asyncdeploy.drivers.engine._ops import (
    ClaimAnswer,
    ContainerLook,
    ContainerRef,
    WorkloadSnapshot,
)

ME = Owner(host="here", boot_id="b", pid=1, pid_started="1")
PAUSE = ContainerRef(id="p", name="pause", role="pause", running=True)
SIDECAR = ContainerRef(id="h", name="autoheal", role="autoheal", running=True)
TIMINGS = DrainTimings()


@attrs.define
class Run:
    """One interleaving: the machine, what is outstanding, and what was asked when."""

    m: WorkloadDrain
    now: float = 0.0
    step: int = 0
    pending: dict[Key, Command] = attrs.field(factory=dict)
    asked: list[tuple[int, float, object]] = attrs.field(factory=list)  # (step, now, operation)
    told: list[object] = attrs.field(factory=list)
    answered: list[tuple[int, object]] = attrs.field(factory=list)  # (step, operation)
    killed_at: float = math.inf  # the caller's kill request

    def carry(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Tell):
                self.told.append(command.event)
            elif isinstance(command, Cancel):
                self.pending.pop(command.key, None)
            else:
                self.pending[command.key] = command
                if isinstance(command, Do):
                    self.asked.append((self.step, self.now, command.operation))
        self.step += 1

    def next_timer(self) -> tuple[Key, Wake] | None:
        wakes = [(k, c) for k, c in self.pending.items() if isinstance(c, Wake)]
        return min(wakes, key=lambda kc: kc[1].at, default=None)

    def answer(self, key: Key, answer: object, at: float) -> None:
        command = self.pending.pop(key)
        self.now = max(self.now, at)
        if isinstance(command, Do):
            self.answered.append((self.step, command.operation))
        self.carry(self.m.observe(key, answer, now=self.now))

    def kill(self, at: float) -> None:
        self.now = max(self.now, at)
        self.killed_at = min(self.killed_at, self.now)
        self.carry(self.m.kill(now=self.now))


def answer_for(operation: object, kind: int, run: Run) -> object:
    """A well-formed answer to ``operation``; ``kind`` picks among the ones it may get."""
    lost = run.m.gives_up(run.now) or run.m.cleaning
    unavailable = EngineUnavailable("connection reset", engine="fake")
    if kind == 1 and lost:
        return unavailable  # the loop gives up on a call only by its give-up rule
    if kind == 2:
        return WorkloadNotFound("gone", engine="fake", status=404)
    if kind == 3:
        return EngineAPIError("refused", engine="fake", status=500)
    match operation:
        case Claim():
            return ClaimAnswer.CLAIMED
        case RunHook():
            return Hooked(0, False) if kind % 2 == 0 else Hooked(None, True)
        case Signal() | Kill():
            return Sent(kind != 5, since=run.step, before_stream=False)
        case AwaitExit() | Stop():
            return 0 if kind % 2 == 0 else 143
        case AwaitKilled():
            return 137
        case ReadClaim():
            return ClaimSeen(None, None)
        case LookPause():
            return ContainerLook(running=True, paused=True)
        case OwnerAlive():
            return True
        case SignalledBefore():
            return frozenset()
        case FollowLook(refs=refs):  # another delete's drain: nothing seen yet, or all gone
            return {} if kind % 2 else {r.id: None for r in refs}
        case _:
            return None  # RemoveSidecar, Remove, KillPause, RemoveVolumes, the claim's writes


@st.composite
def workloads(draw: st.DrawFn) -> tuple[WorkloadSnapshot, int, bool]:
    count = draw(st.integers(1, 3))
    refs = [
        ContainerRef(
            id=f"c{i}",
            name=f"c{i}",
            role=draw(st.sampled_from(["run", "run", "init", "sidecar"])),
            running=draw(st.booleans()) or i == 0,
            pre_stop=("sh", "-c", "drain") if draw(st.booleans()) else None,
        )
        for i in range(count)
    ]
    sidecar = [SIDECAR] if draw(st.booleans()) else []
    grace = draw(st.sampled_from([0, 5, 30]))
    snapshot = WorkloadSnapshot(
        name="w",
        grace_period_seconds=grace,
        containers=(PAUSE, *sidecar, *refs),
        volumes=draw(st.sampled_from([None, False])),
    )
    return snapshot, grace, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    workloads(),
    st.lists(
        st.tuples(
            st.integers(0, 50),  # which outstanding call is answered
            st.integers(0, 6),  # with what
            st.floats(0, 3),  # how long after the last
            st.integers(0, 40),  # 0: the caller's kill request instead
        ),
        max_size=60,
    ),
)
def test_every_interleaving_keeps_the_drains_promises(
    workload: tuple[WorkloadSnapshot, int, bool], script: list[tuple[int, int, float, int]]
) -> None:
    snapshot, grace, docker = workload
    m = WorkloadDrain(
        snapshot,
        grace=grace,
        started=0.0,
        wall_started=1000.0,
        timings=TIMINGS,
        me=ME,
        claim_is_record=docker,
    )
    run = Run(m)
    run.carry(m.start())
    moves = iter(script)
    for _ in range(2000):  # the script, then plain answers (soonest timer last) to the end
        if m.finished:
            break
        pick, kind, delay, kill = next(moves, (0, 0, 0.0, 1))
        timer = run.next_timer()
        due = timer[1].at if timer is not None else math.inf
        calls = sorted(k for k, c in run.pending.items() if isinstance(c, Do))
        at = min(run.now + delay, due)
        if kill == 0:
            run.kill(at)
        elif calls and (at < due or not timer):
            key = calls[pick % len(calls)]
            command = run.pending[key]
            assert isinstance(command, Do)
            run.answer(key, answer_for(command.operation, kind, run), at)
        elif timer is not None:
            run.answer(timer[0], None, timer[1].at)
        else:
            raise AssertionError(f"stuck: nothing outstanding, not finished ({m.state})")
    assert m.finished, f"not finished: {m.state}, outstanding {sorted(run.pending)}"
    check_promises(run, snapshot, grace)


def check_promises(run: Run, snapshot: WorkloadSnapshot, grace: int) -> None:
    m = run.m
    deadline = m.books.deadline
    drained = [r for r in snapshot.containers if r.role in ("init", "run")]
    # every container's way out starts in one step
    first: dict[str, int] = {}
    for step, _, op in run.asked:
        if isinstance(op, RunHook | Signal | Stop) and op.ref.role in ("init", "run"):
            first.setdefault(op.ref.name, step)
    assert len(set(first.values())) <= 1, first
    # no stop signal twice
    signals = [op.ref.name for _, _, op in run.asked if isinstance(op, Signal | Stop)]
    assert len(signals) == len(set(signals)), signals
    # the sidecar first: asked at the start, before any hook or signal
    for step, _, op in run.asked:
        if isinstance(op, RemoveSidecar):
            assert step == 0
        if isinstance(op, RunHook | Signal | Stop):
            assert step > 0
    # the pause container last: its removal asked once every other removal was answered
    pause_removals = [s for s, _, op in run.asked if isinstance(op, Remove) and op.ref == PAUSE]
    if pause_removals:
        [asked] = pause_removals
        others = [s for s, op in run.answered if isinstance(op, Remove) and op.ref != PAUSE]
        assert all(s <= asked for s in others), (others, asked)
        assert not [
            s for s, _, op in run.asked if isinstance(op, Remove) and op.ref != PAUSE and s > asked
        ]
    # nothing SIGKILLed before the deadline, unless the caller asked to kill now (the pause
    # container, which drains nothing, is killed once nothing else runs)
    for _, now, op in run.asked:
        if isinstance(op, Kill) and grace > 0:
            assert now >= deadline or now >= run.killed_at, (now, deadline, op)
    # one summary, each drained container once
    finished = [e for e in run.told if isinstance(e, DrainFinished)]
    assert len(finished) == 1
    names = [c.name for c in finished[0].summary.containers]
    assert len(names) == len(set(names)) and {r.name for r in drained} <= set(names), names
