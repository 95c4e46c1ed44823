"""The engine drain's core alone: a state machine stepped by hand, no engine, no loop, no
clock but the numbers passed in. What it is told (answers, timers, the kill request) and what it
says to do next (operations, timers, cancellations, events)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._errors import EngineAPIError, EngineUnavailable
from asyncdeploy._events import ContainerExited, DrainFinished, PreStopFinished, SignalSent
from asyncdeploy.drivers.engine._claim import Owner
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._drain.context import gives_up
from asyncdeploy.drivers.engine._drain.core import WorkloadDrain
from asyncdeploy.drivers.engine._drain.protocol import (
    Cancel,
    Claim,
    Command,
    Do,
    Done,
    DrainTimings,
    Exited,
    Fired,
    FollowLook,
    FollowStream,
    Hooked,
    Key,
    Kill,
    KillPause,
    Look,
    NoStream,
    Remove,
    RemoveVolumes,
    RunHook,
    Seen,
    Sent,
    Signal,
    Stop,
    StreamExit,
    StreamSettled,
    Tell,
    WaitExit,
    WaitKilled,
    Wake,
    WriteClaim,
)
from asyncdeploy.drivers.engine._ops import (
    CallNotSent,
    CallUnanswered,
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
    step = m.observe(("record", ""), Fired.FIRED, now=1.0)
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
    assert isinstance(look, FollowStream) and follower.state == "following"


def test_a_signal_sent_is_reported_then_waited_for() -> None:
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("signal", "app"), Sent(True, since=3, before_stream=False), now=0.1)
    assert [type(e) for e in events(step)] == [SignalSent]
    assert ops(step) == [StreamExit(APP, since=3)]
    step = m.observe(("exit", "app"), Exited(0), now=1.1)
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
    step = m.observe(("deadline", ""), Fired.FIRED, now=5.0)
    assert ops(step) == [Kill(APP), Kill(WEB)]
    for name in ("app", "web"):
        step = m.observe(("kill", name), Sent(True, since=7, before_stream=False), now=5.01)
        assert [o for o in ops(step) if isinstance(o, StreamExit | WaitKilled)]
    m.observe(("killed", "app"), Exited(0), now=5.02)
    m.observe(("killed", "web"), Exited(137), now=5.02)
    outcomes = {t.name: (t.outcome, t.exit_code) for t in m.tracked}
    assert outcomes == {"app": ("exited", 0), "web": ("killed", 137)}


def test_the_pause_goes_last_and_a_plan_without_volumes_is_not_scanned() -> None:
    m = machine(APP, volumes=False)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.observe(("signal", "app"), Sent(True, 0, False), now=0.1)
    step = m.observe(("exit", "app"), Exited(0), now=0.5)
    # nothing runs any more: the pause's kill (its network teardown) overlaps the removals
    assert ops(step) == [Remove(APP), KillPause(PAUSE)]
    assert ops(m.observe(("killpause", ""), Done.DONE, now=0.6)) == []
    assert ops(m.observe(("remove", "app"), Done.DONE, now=0.7)) == [Remove(PAUSE)]
    step = m.observe(("remove", "pause"), Done.DONE, now=0.8)
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
    assert isinstance(look, FollowStream)  # the exit stream tells first
    m.observe(("follow", ""), Seen({"a": ContainerLook(running=True)}), now=0.1)
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
    m.unreachable(1.0)
    not_sent = CallNotSent("gone", engine="e")  # a signal is given up on only when never sent
    step = m.observe(("signal", "app"), not_sent, now=10.0)
    assert Signal(APP) not in ops(step)  # given up on: not asked again
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
    assert wait == StreamSettled(APP, since=-1)  # its exit, from a look once the stream opens
    assert ops(m.observe(("exit", "app"), refused, now=0.03)) == []
    [kill] = ops(m.observe(("deadline", ""), Fired.FIRED, now=5.0))
    assert kill == Kill(APP)
    assert m.books.errors == [f"stop app: {refused}"]  # a line once


# --- the decisions the core makes of a call's answer (the loop makes each call once) ---------

LOST = EngineUnavailable("connection reset", engine="fake")
RESTARTING = ContainerRef(
    id="r", name="restarting", role="run", running=True, restart_policy="always"
)


def wakes(commands: list[Command]) -> dict[Key, float]:
    return {c.key: c.at for c in commands if isinstance(c, Wake)}


def test_a_call_lost_with_the_connection_is_asked_again_after_a_pause_until_given_up() -> None:
    """A connection that blinks kills nothing: before the deadline a lost call is asked again,
    after a pause that grows; past the deadline plus ``give_up_after`` its loss is the
    continuation's (the engine is unreachable); an answer makes it reachable again."""
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    # not running at its signal: its exit, as the engine's wait tells it
    assert ops(m.observe(("signal", "app"), Sent(False, 1, False), now=0.1)) == [WaitExit(APP)]
    pauses = DrainTimings().engine_call.pauses()
    step = m.observe(("exit", "app"), LOST, now=1.0)
    assert ops(step) == [] and wakes(step) == {("exit", "app"): 1.0 + next(pauses)}
    assert m.unreachable_since == 1.0
    step = m.observe(("exit", "app"), Fired.FIRED, now=1.05)
    assert ops(step) == [WaitExit(APP)]
    step = m.observe(("exit", "app"), LOST, now=2.0)
    assert wakes(step) == {("exit", "app"): 2.0 + next(pauses)}  # longer
    m.observe(("exit", "app"), Fired.FIRED, now=2.1)
    assert m.unreachable_since == 1.0  # the first loss counts
    # the deadline kills what still runs; a kill lost past the deadline is asked again...
    [kill] = ops(m.observe(("deadline", ""), Fired.FIRED, now=5.0))
    assert kill == Kill(APP)
    assert wakes(m.observe(("kill", "app"), LOST, now=9.0))
    assert ops(m.observe(("kill", "app"), Fired.FIRED, now=9.1)) == [Kill(APP)]
    # ...until the engine is given up on: give_up_after past the deadline
    step = m.observe(("kill", "app"), LOST, now=10.0)
    assert ("kill", "app") not in wakes(step) and Kill(APP) not in ops(step)
    assert m.lost and m.call_bound(10.0) == DrainTimings().give_up_after


def test_an_answer_makes_the_engine_reachable_again() -> None:
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.observe(("signal", "app"), Sent(False, since=1, before_stream=False), now=0.1)
    m.observe(("exit", "app"), LOST, now=1.0)
    m.observe(("exit", "app"), Fired.FIRED, now=1.1)
    m.observe(("exit", "app"), Exited(0), now=1.2)
    assert m.unreachable_since is None and not m.lost


def test_a_call_the_engine_took_and_never_answered_is_not_asked_again() -> None:
    """An engine that takes a call and does not answer it in its bound is unreachable since
    the call went out; the call may have landed: its continuation has it."""
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.observe(("signal", "app"), Sent(False, since=1, before_stream=False), now=0.1)
    assert m.call_bound(0.1) == 5.0 + DrainTimings().call_margin - 0.1
    unanswered = CallUnanswered("no answer in 35 s", engine="fake")
    step = m.observe(("exit", "app"), unanswered, now=35.1)
    assert m.unreachable_since == 0.1  # when it was asked
    assert ("exit", "app") not in wakes(step)
    assert m.lost  # past the deadline and the give-up margin: its line in the summary


def test_a_removal_may_take_the_whole_cleanup_bound_and_a_follower_as_long() -> None:
    """A loaded engine's removals queue behind one another (Podman, forty workloads on two
    loaded cores: over 30 s, so that CI's eight deleters once failed past the call margin with
    every container ended): once the clean-up has begun, a removal may take to its end; a
    follower's looks wait behind the owner's removals, which begin by the deadline."""
    timings = DrainTimings()
    m = machine(APP)  # grace 5
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    assert m.call_bound(0.1) == 5.0 + timings.call_margin - 0.1  # draining: the margin
    m.observe(("signal", "app"), Sent(True, since=3, before_stream=False), now=0.1)
    step = m.observe(("exit", "app"), Exited(0), now=1.0)
    assert Remove(APP) in ops(step)
    assert m.call_bound(1.0, removal=True) == timings.cleanup_timeout  # to its end: 1.0 + 60
    assert m.call_bound(20.0, removal=True) == 1.0 + timings.cleanup_timeout - 20.0
    assert m.call_bound(50.0, removal=True) == timings.call_margin  # at least the margin
    # any other call, a kill say, as before: an engine that does not answer it is not waited
    # for to the clean-up's end
    assert m.call_bound(2.0) == 5.0 + timings.call_margin - 2.0
    # which is which, by the operation the loop carries
    assert m.bound_for(Remove(APP))(2.0) == m.call_bound(2.0, removal=True)
    assert m.bound_for(Kill(APP))(2.0) == m.call_bound(2.0)
    m.observe(("remove", "app"), Done.DONE, now=40.0)  # answered past the deadline's margin
    assert not m.lost and m.unreachable_since is None

    paused = ContainerRef(id="p", name="pause", role="pause", running=True, paused=True)
    snapshot = WorkloadSnapshot(name="w", grace_period_seconds=5, containers=(paused, APP))
    follower = WorkloadDrain(
        snapshot, grace=5, started=0.0, wall_started=0.0, timings=timings, me=ME
    )
    follower.start()
    assert follower.state == "following"
    assert follower.call_bound(2.0) == 5.0 + timings.cleanup_timeout - 2.0


def test_a_stop_signal_whose_answer_was_lost_is_taken_as_sent_and_never_sent_again() -> None:
    """It may have landed: a signal twice is not a drain. Its end is waited for, from a look
    once the exit stream is open (an exit since it went out is not in the stream's count)."""
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("signal", "app"), LOST, now=0.1)
    assert [type(e) for e in events(step)] == [SignalSent] and ("signal", "app") not in wakes(step)
    assert ops(step) == [StreamSettled(APP, since=-1)]  # then a look, once the stream opens
    assert m.unreachable_since is None  # a lost answer is no loss of the engine: it may be up


def test_a_stop_signal_that_never_reached_the_engine_is_sent_again() -> None:
    m = machine(APP)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("signal", "app"), CallNotSent("refused", engine="fake"), now=0.1)
    assert not events(step) and wakes(step)
    assert ops(m.observe(("signal", "app"), Fired.FIRED, now=0.2)) == [Signal(APP)]


def test_a_stop_whose_answer_was_lost_waits_for_the_engine_to_tell_the_exit() -> None:
    """Where a kill restarts (Podman's restart policy), the engine's stop drains: a lost answer
    is not a stop sent again: the container stops all the same, its exit as the engine says."""
    snapshot = WorkloadSnapshot(
        name="w", grace_period_seconds=5, containers=(PAUSE, RESTARTING), volumes=False
    )
    m = WorkloadDrain(
        snapshot,
        grace=5,
        started=0.0,
        wall_started=1000.0,
        timings=DrainTimings(),
        me=ME,
        kill_triggers_restart=True,
    )
    m.start()
    [stop] = ops(m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0))
    assert isinstance(stop, Stop)
    step = m.observe(("exit", "restarting"), LOST, now=0.1)
    assert ops(step) == [WaitExit(RESTARTING)]
    assert not [op for op in ops(step) if isinstance(op, Stop)]


def test_a_signal_refused_while_its_container_restarts_is_sent_again_once_it_runs() -> None:
    """It crashed in its hook and its restart policy runs it again: Docker refuses a kill
    during the restart (not running); a look that sees it running sends the signal again
    after a pause, and its end is waited for from the first signal's mark, restarts and all."""
    m = machine(RESTARTING)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m.observe(("signal", "restarting"), Sent(False, 4, False), now=0.1)
    assert ops(step) == [Look(RESTARTING)] and not events(step)
    step = m.observe(("signal", "restarting"), ContainerLook(running=True), now=0.2)
    restart = DrainTimings().restart.first
    assert ops(step) == [] and wakes(step) == {("signal", "restarting"): 0.2 + restart}
    step = m.observe(("signal", "restarting"), Fired.FIRED, now=0.2 + restart)
    assert ops(step) == [Signal(RESTARTING)]
    step = m.observe(("signal", "restarting"), Sent(True, 9, True), now=1.0)
    assert [type(e) for e in events(step)] == [SignalSent]
    # the stream's death after the first mark, or a look that sees it stopped
    assert ops(step) == [StreamExit(RESTARTING, 4), Look(RESTARTING)]


def test_a_signal_that_finds_its_restartable_container_stopped_waits_for_its_exit() -> None:
    m = machine(RESTARTING)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    m.observe(("signal", "restarting"), Sent(False, 4, False), now=0.1)
    step = m.observe(("signal", "restarting"), ContainerLook(running=False), now=0.2)
    assert ops(step) == [WaitExit(RESTARTING)]
    assert not events(step)  # no signal went out


HOOKED = ContainerRef(id="k", name="hooked", role="run", running=True, pre_stop=("drain",))


def test_a_container_that_dies_during_its_hook_ends_the_hook_and_is_signalled() -> None:
    """The hook's exec and the container's death are asked together; the death ends the hook
    (failed, no code: on to the signal) and the exec is cancelled."""
    m = machine(HOOKED)
    m.start()
    step = m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    assert ops(step) == [RunHook(HOOKED, PAUSE), StreamExit(HOOKED)]
    step = m.observe(("hookdeath", "hooked"), Exited(137), now=0.5)
    assert Cancel(("hook", "hooked")) in step and ops(step) == [Signal(HOOKED)]
    [finished, *_] = events(step)
    assert isinstance(finished, PreStopFinished) and finished.exit_code is None
    assert not finished.timed_out


def test_a_hook_that_ends_first_drops_the_wait_for_a_death_and_no_stream_leaves_it_alone() -> None:
    m = machine(HOOKED)
    m.start()
    m.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    assert ops(m.observe(("hookdeath", "hooked"), NoStream.LOST, now=0.1)) == []
    step = m.observe(("hook", "hooked"), Hooked(0, False), now=0.5)
    assert ops(step) == [Signal(HOOKED)]
    m2 = machine(HOOKED)
    m2.start()
    m2.observe(("claim", ""), ClaimAnswer.CLAIMED, now=0.0)
    step = m2.observe(("hook", "hooked"), Hooked(0, False), now=0.5)
    assert Cancel(("hookdeath", "hooked")) in step and ops(step) == [Signal(HOOKED)]


def test_a_follower_without_an_exit_stream_looks_at_the_end_of_each_step() -> None:
    """The stream tells a follower what became of the containers; without one (lost, never
    opened), it looks at each, at the step's end: a follower's looks do not compete with the
    owners' signals."""
    m = machine(APP)
    m.start()
    [stream] = ops(m.observe(("claim", ""), ClaimAnswer.HELD, now=0.0))
    assert isinstance(stream, FollowStream)
    step = m.observe(("follow", ""), NoStream.LOST, now=0.01)
    assert ops(step) == [] and wakes(step) == {("follow", ""): stream.until}
    step = m.observe(("follow", ""), Fired.FIRED, now=stream.until)
    assert ops(step) == [FollowLook(stream.refs)]
    step = m.observe(("follow", ""), Seen({"a": None, "p": None}), now=stream.until + 0.1)
    assert m.finished
