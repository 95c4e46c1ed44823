"""The engine drain's core alone: a state machine stepped by hand, no engine, no loop, no
clock but the numbers passed in. What it is told (answers, timers, the kill request) and what it
says to do next (operations, timers, cancellations, events)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._errors import EngineAPIError, EngineUnavailable
from asyncdeploy._events import ContainerExited, DrainFinished, SignalSent
from asyncdeploy.drivers.engine._claim import Owner
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._drain.core import WorkloadDrain, gives_up
from asyncdeploy.drivers.engine._drain.protocol import (
    AwaitExit,
    AwaitKilled,
    Cancel,
    Claim,
    Command,
    Do,
    DrainTimings,
    FollowLook,
    Kill,
    KillPause,
    Remove,
    RemoveVolumes,
    Sent,
    Signal,
    Tell,
    Wake,
    WriteClaim,
)
from asyncdeploy.drivers.engine._ops import (
    ClaimAnswer,
    ContainerLook,
    ContainerRef,
    WorkloadSnapshot,
)
from asyncdeploy.testing import FakeOps

AFTER = 5.0
DEADLINE = 100.0
ME = Owner(host="here", boot_id="b", pid=1, pid_started="1")
PAUSE = ContainerRef(id="p", name="pause", role="pause", running=True)
APP = ContainerRef(id="a", name="app", role="run", running=True)
WEB = ContainerRef(id="w", name="web", role="run", running=True)


def machine(
    *refs: ContainerRef, grace: int = 5, volumes: bool | None = False, docker: bool = False
) -> WorkloadDrain:
    snapshot = WorkloadSnapshot(
        name="w", grace_period_seconds=grace, containers=(PAUSE, *refs), volumes=volumes
    )
    return WorkloadDrain(
        snapshot,
        grace=grace,
        started=0.0,
        wall_started=1000.0,
        timings=DrainTimings(),
        me=ME,
        claim_is_record=docker,
    )


def ops(commands: list[Command]) -> list[object]:
    return [c.operation for c in commands if isinstance(c, Do)]


def events(commands: list[Command]) -> list[object]:
    return [c.event for c in commands if isinstance(c, Tell)]


def test_the_claim_is_the_only_call_before_the_signals_and_the_record_comes_after() -> None:
    """Signal first, book-keep after: once the pause is granted, every container's signal goes
    out in the same step; the claim record is a timer for later, not a call in between."""
    m = machine(APP, WEB)
    [claim] = ops(m.start())
    assert isinstance(claim, Claim) and claim.pause == PAUSE
    step = m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.01)
    assert ops(step) == [Signal(APP), Signal(WEB)]
    wakes = {c.key: c.at for c in step if isinstance(c, Wake)}
    assert wakes == {("deadline", ""): 5.0, ("record", ""): DrainTimings().record_delay}
    step = m.observe(("record", ""), None, now=1.0)
    [write] = ops(step)
    assert isinstance(write, WriteClaim) and write.record.owner == ME
    assert write.record.started == 1000.0 and write.record.grace == 5


def test_on_docker_the_claim_is_the_record_and_nothing_is_paused() -> None:
    """The claim is the record's volume (one call, no runtime fork: a pause forks runc), and
    the pause container is never paused (a paused one SIGKILLed while its dependents exit is
    where Docker 20.10 deadlocked); a claim another delete holds is followed."""
    m = machine(APP, docker=True)
    [claim] = ops(m.start())
    assert isinstance(claim, Claim) and claim.record.owner == ME
    step = m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.01)
    assert ops(step) == [Signal(APP)]
    assert not [c for c in step if isinstance(c, Wake) and c.key == ("record", "")]

    follower = machine(APP, docker=True)
    follower.start()
    [look] = ops(follower.observe(("claim", ""), ClaimAnswer.HELD, now=0.01))
    assert isinstance(look, FollowLook) and follower.state == "following"


def test_a_signal_sent_is_reported_then_waited_for() -> None:
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("signal", "app"), Sent(True, since=3, before_stream=False), now=0.1)
    assert [type(e) for e in events(step)] == [SignalSent]
    assert ops(step) == [AwaitExit(APP, since=3, before_stream=False)]
    step = m.observe(("exit", "app"), 0, now=1.1)
    [exited] = events(step)
    assert isinstance(exited, ContainerExited) and exited.exit_code == 0 and exited.graceful
    # every pipeline ended before the deadline: the cleanup starts, the deadline is dropped
    assert Cancel(("deadline", "")) in step and Remove(APP) in ops(step)


def test_a_container_that_exits_by_itself_before_its_kill_lands_is_exited() -> None:
    """The deadline's SIGKILL went out, but the engine reports exit 0: it had ended on its
    own (issue 25 item 3); only a death the kill caused (137) is ``killed``."""
    m = machine(APP, WEB)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("deadline", ""), None, now=5.0)
    assert ops(step) == [Kill(APP), Kill(WEB)]
    for name in ("app", "web"):
        step = m.observe(("kill", name), Sent(True, since=7, before_stream=False), now=5.01)
        assert [o for o in ops(step) if isinstance(o, AwaitKilled)]
    m.observe(("killed", "app"), 0, now=5.02)
    m.observe(("killed", "web"), 137, now=5.02)
    outcomes = {t.name: (t.outcome, t.exit_code) for t in m.tracked}
    assert outcomes == {"app": ("exited", 0), "web": ("killed", 137)}


def test_the_pause_goes_last_and_a_plan_without_volumes_is_not_scanned() -> None:
    m = machine(APP, volumes=False)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.observe(("signal", "app"), Sent(True, 0, False), now=0.1)
    step = m.observe(("exit", "app"), 0, now=0.5)
    # nothing runs any more: the pause's kill (its network teardown) overlaps the removals
    assert ops(step) == [Remove(APP), KillPause(PAUSE)]
    assert ops(m.observe(("killpause", ""), None, now=0.6)) == []
    assert ops(m.observe(("remove", "app"), None, now=0.7)) == [Remove(PAUSE)]
    step = m.observe(("remove", "pause"), None, now=0.8)
    assert not [o for o in ops(step) if isinstance(o, RemoveVolumes)]
    assert isinstance(events(step)[-1], DrainFinished) and m.finished


def test_a_follower_killed_kills_what_runs() -> None:
    """Following another delete, the caller's kill request: the follow is cancelled and what
    still runs is SIGKILLed (a follower that was cut used to leave it running)."""
    paused = ContainerRef(id="p", name="pause", role="pause", running=True, paused=True)
    snapshot = WorkloadSnapshot(name="w", grace_period_seconds=5, containers=(paused, APP))
    m = WorkloadDrain(
        snapshot, grace=5, started=0.0, wall_started=0.0, timings=DrainTimings(), me=ME
    )
    [look] = ops(m.start())
    assert isinstance(look, FollowLook) and not look.fresh  # the exit stream tells first
    m.observe(("follow", ""), {"a": ContainerLook(running=True)}, now=0.1)
    step = m.kill(now=0.2)
    assert Cancel(("follow", "")) in step and ops(step) == [Kill(APP)]


def test_an_engine_that_stays_away_is_given_up_and_said_once() -> None:
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.unreachable(1.0)
    m.unreachable(2.0)
    assert m.unreachable_since == 1.0  # the first loss
    assert not m.gives_up(9.0) and m.gives_up(10.0)  # deadline 5 + give_up_after 5
    m.reached()
    assert m.unreachable_since is None
    lost = EngineUnavailable("gone", engine="e")
    m.observe(("signal", "app"), lost, now=10.0)
    assert m.books.errors == [
        "engine unreachable for 5 s past the deadline (gone); delete again once it answers"
    ]


@pytest.mark.parametrize(
    ("now", "since", "cleaning", "expected"),
    [
        (99.0, 0.0, False, False),  # before the deadline: a blink kills nothing, however long
        (99.0, 0.0, True, True),  # cancelled, cleaning up early: 99 s lost is past 5
        (99.0, 95.0, True, False),  # cancelled, lost 4 s ago
        (104.0, 0.0, False, False),  # past the deadline: counted from the deadline, 4 s
        (105.0, 0.0, False, True),  # 5 s past the deadline
        (107.0, 103.0, False, False),  # lost after the deadline: counted from the loss, 4 s
        (108.0, 103.0, True, True),
    ],
)
def test_the_engine_gets_its_time_from_the_later_of_the_deadline_and_the_loss(
    now: float, since: float, cleaning: bool, expected: bool
) -> None:
    assert (
        gives_up(now, deadline=DEADLINE, unreachable_since=since, cleaning=cleaning, after=AFTER)
        is expected
    )


@given(
    since=st.floats(0, 200),
    lost_for=st.floats(0, 200),
    cleaning=st.booleans(),
)
def test_giving_up_never_comes_sooner_than_after_seconds_lost(
    since: float, lost_for: float, cleaning: bool
) -> None:
    now = since + lost_for
    if gives_up(now, deadline=DEADLINE, unreachable_since=since, cleaning=cleaning, after=AFTER):
        assert lost_for >= AFTER
        assert cleaning or now >= DEADLINE + AFTER


@pytest.mark.anyio
async def test_a_drain_of_nothing_ends_at_once() -> None:
    """No workload to drain (a find that matched none): the loop does not wait for an answer
    that never comes."""
    with anyio.fail_after(5):
        assert (
            await drain_workloads(FakeOps(), [], grace_period_seconds=None, emit=lambda _: None)
            == []
        )


def test_a_signal_or_wait_the_engine_refuses_is_no_kill_before_the_deadline() -> None:
    """A stop signal refused with an error (a 500: not a lost connection, not a container gone)
    leaves the container running, undrained: its end is waited for, and only the deadline
    kills it. (It was SIGKILLed at once: every pipeline had "ended". Found by the property
    test in test_drain_core_property.py.)"""
    refused = EngineAPIError("kill app: refused", engine="fake", status=500)
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.01)
    [wait] = ops(m.observe(("signal", "app"), refused, now=0.02))
    assert isinstance(wait, AwaitExit) and wait.ref == APP
    assert ops(m.observe(("exit", "app"), refused, now=0.03)) == []
    [kill] = ops(m.observe(("deadline", ""), None, now=5.0))
    assert kill == Kill(APP)
    assert m.books.errors == [f"stop app: {refused}"]  # a line once
