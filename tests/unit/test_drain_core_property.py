"""The engine drain's core driven through interleavings (hypothesis): answers in any order and
at any time the loop could give them, failures, containers that die by themselves, the caller's
kill request, timers firing. Whatever the interleaving, the promises of docs/drain.md hold:

- every container's way out (its hook, or its stop signal) starts in one step, once the claim
  is answered: no container waits for another's call;
- the autoheal sidecar goes first (its kill and removal are asked before any hook or signal),
  and the pause container last (its removal is asked once every other removal was answered);
- nothing is SIGKILLed before the deadline unless the caller asked to kill now, however often
  the connection is lost (a call lost with it is the core's to ask again, by its give-up rule);
- no stop signal is sent twice: asked again only after an answer that says it never reached
  the engine (``CallNotSent``) or no process (not delivered: a container restarting under its
  policy, signalled again once it runs);
- one summary, naming each drained container once.

The loop's own contract is kept by the driver here: a timer fires at its time and not before,
and no answer comes after a timer that is due. Any call may be lost with the connection.
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
    Answer,
    Cancel,
    Claim,
    ClaimSeen,
    Command,
    Do,
    Done,
    DrainTimings,
    EngineOp,
    Exited,
    Fired,
    FollowLook,
    FollowStream,
    Hooked,
    Key,
    Kill,
    Look,
    LookPause,
    NoStream,
    OwnerAlive,
    OwnerState,
    ReadClaim,
    Remove,
    RunHook,
    Seen,
    Sent,
    Settled,
    Signal,
    SignalledBefore,
    Stop,
    StreamExit,
    StreamSettled,
    Tell,
    WaitExit,
    WaitKilled,
    Wake,
)
from asyncdeploy.drivers.engine._ops import (
    CallNotSent,
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
    # (step, operation, answer)
    answered: list[tuple[int, object, Answer]] = attrs.field(factory=list)
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

    def answer(self, key: Key, answer: Answer, at: float) -> None:
        command = self.pending.pop(key)
        self.now = max(self.now, at)
        if isinstance(command, Do):
            self.answered.append((self.step, command.operation, answer))
        self.carry(self.m.observe(key, answer, now=self.now))

    def kill(self, at: float) -> None:
        self.now = max(self.now, at)
        self.killed_at = min(self.killed_at, self.now)
        self.carry(self.m.kill(now=self.now))


def answer_for(operation: EngineOp, kind: int, run: Run) -> Answer:
    """A well-formed answer to ``operation``; ``kind`` picks among the ones it may get (the exit
    stream's waits call no engine: they fail by its loss alone)."""
    if isinstance(operation, StreamExit | StreamSettled | FollowStream):
        pass
    elif kind == 1:
        return EngineUnavailable("connection reset", engine="fake")  # it may have landed
    elif kind == 6:
        return CallNotSent("connection refused", engine="fake")  # it surely did not
    elif kind == 2:
        return WorkloadNotFound("gone", engine="fake", status=404)
    elif kind == 3:
        return EngineAPIError("refused", engine="fake", status=500)
    match operation:
        case Claim():
            return ClaimAnswer.CLAIMED
        case RunHook():
            return Hooked(0, False) if kind % 2 == 0 else Hooked(None, True)
        case Signal() | Kill():
            return Sent(kind != 5, since=run.step, before_stream=False)
        case WaitExit() | Stop():
            return Exited(0 if kind % 2 == 0 else 143)
        case WaitKilled():
            return Exited(137)
        case StreamExit():  # a death (by the signal, the kill, or in a hook), or no stream
            return NoStream.LOST if kind == 4 else Exited(137 if kind == 5 else 0)
        case StreamSettled(since=since):
            return Settled(max(since, run.step), reported=kind % 2 == 1, lost=kind == 4)
        case Look():  # running again under its restart policy, or stopped
            return ContainerLook(running=kind == 5, exit_code=None if kind == 5 else 0)
        case ReadClaim():
            return ClaimSeen(None, None)
        case LookPause():
            return ContainerLook(running=True, paused=True)
        case OwnerAlive():
            return OwnerState(True)
        case SignalledBefore():
            return frozenset()
        case FollowLook(refs=refs) | FollowStream(refs=refs):
            # another delete's drain: nothing seen yet, or all gone; or no stream to tell
            if isinstance(operation, FollowStream) and kind == 4:
                return NoStream.LOST
            return Seen({} if kind % 2 else {r.id: None for r in refs})
        case _:
            return Done.DONE  # Remove, KillPause, RemoveVolumes, the claim's writes


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
            restart_policy=draw(st.sampled_from(["no", "no", "always"])),
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
            run.answer(timer[0], Fired.FIRED, timer[1].at)
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
    # no stop signal twice: asked again only after an answer that it never reached the engine,
    # or never reached a process (not delivered: the container was between two runs under its
    # restart policy, and is signalled again once it runs)
    signals = [op.ref.name for _, _, op in run.asked if isinstance(op, Signal | Stop)]
    not_sent = [
        op.ref.name
        for _, op, answer in run.answered
        if isinstance(op, Signal | Stop)
        and (isinstance(answer, CallNotSent) or (isinstance(answer, Sent) and not answer.delivered))
    ]
    for name in set(signals):
        assert signals.count(name) <= 1 + not_sent.count(name), (signals, not_sent)
    # the sidecar first: asked at the start, before any hook or signal
    # (asked again, when the connection was lost, before the pipelines start)
    sidecar = [
        step
        for step, _, op in run.asked
        if isinstance(op, Kill | Remove) and op.ref.role == "autoheal"
    ]
    way_out = [step for step, _, op in run.asked if isinstance(op, RunHook | Signal | Stop)]
    assert sidecar[:1] in ([], [0])
    assert all(s < w for s in sidecar for w in way_out), (sidecar, way_out)
    # ...and answered before them (a removal still under way when the app is signalled lets
    # the autoheal resurrect it: seen on rootless Podman, whose drain claims by record)
    sidecar_answered = [
        step
        for step, op, _ in run.answered
        if isinstance(op, Kill | Remove) and op.ref.role == "autoheal"
    ]
    assert all(s <= w for s in sidecar_answered for w in way_out), (sidecar_answered, way_out)
    assert all(w > 0 for w in way_out)
    # the pause container last: its removal asked once every other removal was answered
    pause_removals = [s for s, _, op in run.asked if isinstance(op, Remove) and op.ref == PAUSE]
    if pause_removals:
        asked = pause_removals[0]  # (asked again only when the connection was lost)
        others = [s for s, op, _ in run.answered if isinstance(op, Remove) and op.ref != PAUSE]
        assert all(s <= asked for s in others), (others, asked)
        assert not [
            s for s, _, op in run.asked if isinstance(op, Remove) and op.ref != PAUSE and s > asked
        ]
    # nothing SIGKILLed before the deadline, unless the caller asked to kill now (the autoheal
    # sidecar and the pause container drain nothing: the one first, the other once nothing
    # else runs)
    for _, now, op in run.asked:
        if isinstance(op, Kill) and grace > 0 and op.ref.role != "autoheal":
            assert now >= deadline or now >= run.killed_at, (now, deadline, op)
    # one summary, each drained container once
    finished = [e for e in run.told if isinstance(e, DrainFinished)]
    assert len(finished) == 1
    names = [c.name for c in finished[0].summary.containers]
    assert len(names) == len(set(names)) and {r.name for r in drained} <= set(names), names


def test_a_drain_claimed_by_record_waits_for_the_autoheals_removal() -> None:
    """An engine that cannot pause (rootless Podman on cgroup v1) claims by the record; a drain
    that found none takes the workload over, and began its signals while the autoheal's
    removal was still under way: seen as SignalSent(app) before SidecarRemoved(autoheal), and
    an autoheal that could resurrect the app it drains."""
    app = ContainerRef(id="a", name="app", role="run", running=True)
    snapshot = WorkloadSnapshot(
        name="w", grace_period_seconds=30, containers=(PAUSE, SIDECAR, app), volumes=False
    )
    m = WorkloadDrain(snapshot, grace=30, started=0.0, wall_started=1000.0, timings=TIMINGS, me=ME)
    run = Run(m)
    run.carry(m.start())
    kill = next(
        k for k, c in run.pending.items() if isinstance(c, Do) and isinstance(c.operation, Kill)
    )
    claim = next(
        k for k, c in run.pending.items() if isinstance(c, Do) and isinstance(c.operation, Claim)
    )
    run.answer(
        claim, EngineAPIError("cannot pause: no cgroup freezer", engine="fake", status=500), 0.1
    )
    read = next(
        k
        for k, c in run.pending.items()
        if isinstance(c, Do) and isinstance(c.operation, ReadClaim)
    )
    run.answer(read, ClaimSeen(None, None), 0.2)
    go_on(run, but=kill)
    ways_out = [op for _, _, op in run.asked if isinstance(op, RunHook | Signal | Stop)]
    assert ways_out == [], "nothing signalled while the autoheal may still run"
    run.answer(kill, Sent(True, since=run.step, before_stream=False), run.now + 0.01)
    remove = next(
        k for k, c in run.pending.items() if isinstance(c, Do) and isinstance(c.operation, Remove)
    )
    run.answer(remove, Done.DONE, run.now + 0.01)
    go_on(run, but=None)
    assert [op.ref.name for _, _, op in run.asked if isinstance(op, Signal)] == ["app"]


def go_on(run: Run, *, but: Key | None) -> None:
    """Answer what is asked (plainly) and fire the timers, in turn, until a signal is asked or
    nothing is left but ``but``."""
    for _ in range(40):
        if any(isinstance(op, Signal) for _, _, op in run.asked):
            return
        calls = [k for k, c in run.pending.items() if isinstance(c, Do) and k != but]
        timer = run.next_timer()
        if calls:
            command = run.pending[calls[0]]
            assert isinstance(command, Do)
            run.answer(calls[0], answer_for(command.operation, 0, run), run.now + 0.01)
        elif timer is not None:
            run.answer(timer[0], Fired.FIRED, timer[1].at)
        else:
            return
