"""The engine drain without an engine: a fake ContainerOps (asyncdeploy.testing.FakeOps) drives the
ordering, the per-container pipelines, the deadline, grace 0, cancellation, the connection
blinks, two deletes at once and every error path. The real engines' side: tests/engines."""

from __future__ import annotations

import time
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy import Container, WorkloadPlan
from asyncdeploy._backoff import Backoff
from asyncdeploy._errors import (
    DrainError,
    DrainUnreachable,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PauseRemoved,
    PreStopFinished,
    SidecarRemoved,
    SignalSent,
)
from asyncdeploy.deployer import Deployer
from asyncdeploy.drivers import _books
from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.engine import _claim, _drain
from asyncdeploy.drivers.engine._drain.protocol import DrainTimings
from asyncdeploy.drivers.engine._ops import WorkloadSnapshot
from asyncdeploy.labels import LABEL_CLAIM, LABEL_CLAIM_RECORD
from asyncdeploy.plan import DEFAULT_GRACE_PERIOD_SECONDS
from asyncdeploy.testing import ENGINE, FakeDriver, FakeOps, refused

pytestmark = pytest.mark.anyio


# The drain's margins, scaled down so a test takes a fraction of a second: one value, passed in.
FAST = DrainTimings(
    give_up_after=0.3,
    engine_call=Backoff(0.05, 0.1),
    kill_wait=0.5,
    record_delay=0.1,
    record_wait=0.3,
    owner_bound=2.0,
    takeover_settle=0.05,
    follow=Backoff(0.05, 0.05),
    follow_catch_up=0.05,
    follow_look_every=0.05,
    call_margin=1.0,
)


async def drain_workloads(*args: Any, **kw: Any) -> list[DrainSummary]:
    """The engine drain, with the test timings unless others are passed."""
    kw.setdefault("timings", FAST)
    return await _drain.drain_workloads(*args, **kw)


def pod(ops: FakeOps, *, with_init: bool = False) -> FakeOps:
    ops.add("pause", "pause")
    if with_init:
        ops.add("setup", "init", state="exited", exit_code=0)
    return ops


async def drain(
    ops: FakeOps, *, grace: int | None = None, declared: int = 30
) -> tuple[DrainSummary, list[DrainEvent]]:
    events: list[DrainEvent] = []
    [summary] = await drain_workloads(
        ops,
        [ops.snapshot(grace=declared)],
        grace_period_seconds=grace,
        emit=events.append,
        engine=ENGINE,
    )
    return summary, events


def outcomes(summary: DrainSummary) -> dict[str, tuple[str, int | None]]:
    return {c.name: (c.outcome, c.exit_code) for c in summary.containers}


def names(events: list[DrainEvent], kind: type) -> list[str]:
    return [e.container for e in events if isinstance(e, kind)]  # type: ignore[attr-defined]


def first(events: list[DrainEvent], kind: type, container: str) -> DrainEvent:
    return next(e for e in events if isinstance(e, kind) and e.container == container)  # type: ignore[attr-defined]


# --- the ordering -------------------------------------------------------------------------------


async def test_sidecar_first_then_pipelines_then_removals_and_the_pause_last() -> None:
    ops = pod(FakeOps(), with_init=True)
    ops.add("app", drain=0.1, pre_stop=("drain",))
    ops.add("side", drain=0.05)
    ops.add("autoheal", "autoheal")
    summary, events = await drain(ops, declared=5)

    assert isinstance(events[0], DrainStarted) and isinstance(events[-1], DrainFinished)
    assert events[0].containers == ("pause", "setup", "app", "side", "autoheal")
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("SidecarRemoved") < kinds.index("SignalSent")
    assert ops.log.index(("run_hook", "app", "drain")) < ops.log.index(("signal", "app", "SIGTERM"))
    assert kinds[-2] == "PauseRemoved" and kinds.count("PauseRemoved") == 1
    assert sorted(names(events, ContainerRemoved)) == ["app", "setup", "side"]
    assert ops.log[-2:] == [("remove_volumes", "w", ""), ("drop_claim", "pause", "")]
    assert outcomes(summary) == {
        "setup": ("already-exited", 0),
        "app": ("exited", 0),
        "side": ("exited", 0),
    }
    assert summary.errors == () and summary.grace_period_seconds == 5
    assert ops.calls("claim") == [("claim", "pause", "")]  # the drain is claimed before signals
    assert ops.log.index(("claim", "pause", "")) < ops.log.index(("signal", "app", "SIGTERM"))
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_sidecars_are_signalled_only_after_the_run_containers_exited() -> None:
    """Kubernetes' native-sidecar order: the engine's HTTP hook (the gate's drain), its signal
    and exit, then the sidecar's signal, all inside the one deadline, the pause last."""
    ops = pod(FakeOps())
    ops.add("engine-gate", "sidecar", drain=0.05)
    ops.add("engine", drain=0.2, pre_stop_http=(8000, "/-/drain"))
    summary, events = await drain(ops, declared=5)
    log = ops.log
    assert log.index(("run_http_hook", "pause", "8000 /-/drain")) < log.index(
        ("signal", "engine", "SIGTERM")
    )
    kinds = [(type(e).__name__, getattr(e, "container", None)) for e in events]
    assert kinds.index(("ContainerExited", "engine")) < kinds.index(("SignalSent", "engine-gate"))
    assert kinds.index(("ContainerExited", "engine-gate")) < kinds.index(("PauseRemoved", "pause"))
    assert outcomes(summary) == {"engine-gate": ("exited", 0), "engine": ("exited", 0)}
    assert first(events, PreStopFinished, "engine").exit_code == 0  # type: ignore[attr-defined]


async def test_one_hung_hook_delays_no_other_container() -> None:
    """Each container's hook, signal and exit run on their own under the one deadline."""
    ops = pod(FakeOps())
    ops.add("hung", pre_stop=("sleep",), hook=60, drain=0.1)
    ops.add("fails", pre_stop=("false",), hook_code=1)
    ops.add("broken", pre_stop=("nope",))
    ops.fail("run_hook", "broken", refused("exec", "broken"))
    ops.add("lost", pre_stop=("drain",))
    ops.fail("run_hook", "lost", EngineUnavailable("exec lost", engine=ENGINE))
    summary, events = await drain(ops, declared=1)

    for quick in ("fails", "broken", "lost"):
        exited = first(events, ContainerExited, quick)
        assert exited.elapsed < 0.9, quick  # before the 1 s deadline (it takes ms)
        assert outcomes(summary)[quick] == ("exited", 0)
    hook = first(events, PreStopFinished, "hung")
    assert hook.timed_out and hook.exit_code is None and hook.elapsed >= 1
    assert first(events, PreStopFinished, "fails").exit_code == 1  # type: ignore[attr-defined]
    assert outcomes(summary)["hung"] == ("killed", 137)
    killed = first(events, ContainerForceKilled, "hung")
    assert killed.reason == "deadline" and killed.elapsed >= 1  # type: ignore[attr-defined]
    assert "hung" not in names(events, SignalSent)  # its hook held its own signal, only
    assert summary.errors == ("pre_stop of broken: [500] exec broken: refused (engine=fake)",)


async def test_nothing_is_killed_before_the_deadline() -> None:
    ops = pod(FakeOps())
    ops.add("stubborn", ignores_term=True)
    summary, events = await drain(ops, declared=1)
    killed = first(events, ContainerForceKilled, "stubborn")
    assert killed.elapsed >= 1 and killed.reason == "deadline"  # type: ignore[attr-defined]
    assert outcomes(summary) == {"stubborn": ("killed", 137)}


async def test_grace_0_kills_at_once_and_reports_killed_even_through_the_pause() -> None:
    """No hooks, no TERM. ``slow``'s own SIGKILL lands after the pause's, which took it down:
    it is still ``killed`` (asyncdeploy killed it), not ``exited``."""
    ops = pod(FakeOps())
    ops.add("app", pre_stop=("drain",))
    ops.add("slow")
    ops.delays[("signal", "slow")] = 0.05
    summary, events = await drain(ops, grace=0)
    assert ops.calls("run_hook") == [] and names(events, SignalSent) == []
    assert ops.calls("claim") == []  # grace 0 has no drain to protect
    assert outcomes(summary) == {"app": ("killed", 137), "slow": ("killed", 137)}
    assert sorted(names(events, ContainerForceKilled)) == ["app", "slow"]
    assert [e.graceful for e in events if isinstance(e, ContainerExited)] == [False, False]


async def test_a_restart_policy_on_podman_is_stopped_with_the_time_left() -> None:
    ops = pod(FakeOps())
    ops.kill_triggers_restart = True  # type: ignore[misc]
    ops.add("app", restart_policy="always", drain=0.05)
    summary, events = await drain(ops, declared=3)
    [(_, _, timeout)] = ops.calls("stop", "app")
    assert 2.0 < float(timeout) <= 3.0
    assert names(events, SignalSent) == ["app"] and ops.calls("signal", "app") == []
    assert outcomes(summary) == {"app": ("exited", 0)}


async def test_several_workloads_drain_together_each_under_its_grace() -> None:
    ops = FakeOps()
    ops.add("pause", "pause")
    ops.add("app", ignores_term=True)
    ops.add("pause2", "pause")
    ops.add("db", drain=0.05)
    w = ops.snapshot(workload="w", grace=1, only=["pause", "app"])
    v = ops.snapshot(workload="v", grace=3, only=["pause2", "db"])
    events: list[DrainEvent] = []
    summaries = await drain_workloads(ops, [w, v], grace_period_seconds=None, emit=events.append)
    assert [(s.workload, s.grace_period_seconds) for s in summaries] == [("w", 1), ("v", 3)]
    assert outcomes(summaries[0]) == {"app": ("killed", 137)}
    assert outcomes(summaries[1]) == {"db": ("exited", 0)}
    assert sorted(ops.volumes_removed) == ["v", "w"]


# --- the exit stream ----------------------------------------------------------------------------


async def test_exits_come_from_one_stream_opened_before_the_first_signal() -> None:
    """A delete-all of two workloads opens one stream, before any signal; no exit is asked of
    the engine's ``wait`` (on Podman it answers 1.6 s late and holds an API worker)."""
    ops = FakeOps()
    ops.add("pause", "pause")
    ops.add("app", drain=0.05)
    ops.add("pause2", "pause")
    ops.add("db", drain=0.1)
    w = ops.snapshot(workload="w", grace=2, only=["pause", "app"])
    v = ops.snapshot(workload="v", grace=2, only=["pause2", "db"])
    summaries = await drain_workloads(ops, [w, v], grace_period_seconds=None, emit=lambda e: None)
    assert ops.calls("exits") == [("exits", "", "open")]
    assert ops.log.index(("exits", "", "open")) < ops.log.index(("signal", "app", "SIGTERM"))
    assert ops.calls("wait_exit") == [] and ops.calls("wait_killed") == []
    assert [outcomes(s) for s in summaries] == [{"app": ("exited", 0)}, {"db": ("exited", 0)}]


async def test_a_stream_cut_mid_drain_falls_back_to_the_engines_wait() -> None:
    """``quick`` exits before the cut (the stream told), ``slow`` after: its wait goes to the
    engine, and nothing is killed."""
    ops = pod(FakeOps())
    ops.add("quick", drain=0.02)
    ops.add("slow", drain=0.4)

    async def cut() -> None:
        await anyio.sleep(0.2)
        ops.cut_exit_streams()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cut)
        summary, events = await drain(ops, declared=3)
    assert outcomes(summary) == {"quick": ("exited", 0), "slow": ("exited", 0)}
    assert ops.calls("wait_exit") == [("wait_exit", "slow", "")]
    assert names(events, ContainerForceKilled) == [] and summary.errors == ()
    assert 0.4 <= first(events, ContainerExited, "slow").elapsed < 2


async def test_a_stream_that_never_opens_leaves_every_exit_to_the_engines_wait() -> None:
    ops = pod(FakeOps())
    ops.exit_stream = False
    ops.add("app", drain=0.05)
    ops.add("stubborn", ignores_term=True)
    summary, _ = await drain(ops, declared=1)
    assert outcomes(summary) == {"app": ("exited", 0), "stubborn": ("killed", 137)}
    assert [c[1] for c in ops.calls("wait_exit")] == ["app", "stubborn"]
    assert [c[1] for c in ops.calls("wait_killed")] == ["stubborn"]


async def test_grace_0_removes_each_container_as_soon_as_its_kill_is_seen() -> None:
    """``slow``'s kill call takes 0.3 s; ``app``'s removal does not wait for it. ``app``'s
    kill is confirmed by the stream alone (the engine's wait hangs)."""
    ops = pod(FakeOps())
    ops.add("app")
    ops.add("slow")
    ops.delays[("signal", "slow")] = 0.3
    ops.hang.add(("wait_killed", "app"))
    summary, events = await drain(ops, grace=0)
    assert outcomes(summary) == {"app": ("killed", 137), "slow": ("killed", 137)}
    assert first(events, ContainerRemoved, "app").elapsed < 0.25
    assert isinstance(events[-2], PauseRemoved)


async def test_a_kill_the_stream_is_slow_to_report_is_confirmed_by_the_engine() -> None:
    """After a SIGKILL the first answer counts: the engine's, when the stream lags."""
    ops = pod(FakeOps())
    ops.add("app")
    ops.unreported.add("app")
    summary, events = await drain(ops, grace=0)
    assert outcomes(summary) == {"app": ("killed", 137)}
    assert first(events, ContainerExited, "app").elapsed < 0.25  # not KILL_WAIT (0.5 s)
    assert ops.calls("wait_killed", "app") != []


# --- cancellation -------------------------------------------------------------------------------


async def test_a_cancelled_drain_still_cleans_up_and_ends_with_drain_finished() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=30)
    ops.add("late", pre_stop=("sleep",), hook=30)
    events: list[DrainEvent] = []
    with anyio.move_on_after(0.3) as scope:
        await drain_workloads(
            ops, [ops.snapshot(grace=30)], grace_period_seconds=None, emit=events.append
        )
    assert scope.cancelled_caught
    assert isinstance(events[-1], DrainFinished)
    summary = events[-1].summary
    assert outcomes(summary) == {"app": ("killed", 137), "late": ("killed", 137)}
    assert {e.reason for e in events if isinstance(e, ContainerForceKilled)} == {"cancelled"}  # type: ignore[attr-defined]
    assert isinstance(events[-2], PauseRemoved)
    assert all(b.state == "gone" for b in ops.boxes.values())
    assert ops.volumes_removed == ["w"]


async def test_a_cleanup_that_hangs_is_bounded() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.01)
    ops.hang.add(("remove", "app"))
    events: list[DrainEvent] = []
    [summary] = await drain_workloads(
        ops,
        [ops.snapshot(grace=2)],
        grace_period_seconds=None,
        emit=events.append,
        timings=attrs.evolve(FAST, cleanup_timeout=0.2),
    )
    assert summary.errors == ("cleanup did not finish within 0 s",)
    assert isinstance(events[-1], DrainFinished)


# --- the engine connection ----------------------------------------------------------------------


async def test_a_connection_blink_is_retried_and_kills_nothing() -> None:
    """Every call fails for 0.4 s, from 0.1 s into a 3 s drain: the lost waits are re-armed,
    the signal lost on ``late`` is sent again, and both exit 0 after their drain."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.8)
    ops.add("late", pre_stop=("wait",), hook=0.2, drain=0.2)

    async def blink() -> None:
        await anyio.sleep(0.1)
        ops.down = True
        await anyio.sleep(0.4)
        ops.down = False

    async with anyio.create_task_group() as tg:
        tg.start_soon(blink)
        summary, events = await drain(ops, declared=3)
    assert names(events, ContainerForceKilled) == []
    assert outcomes(summary) == {"app": ("exited", 0), "late": ("exited", 0)}
    assert summary.errors == ()
    assert len(ops.calls("wait_exit", "app")) >= 2  # re-armed
    assert len(ops.calls("signal", "late")) >= 2  # the lost signal was sent again
    assert first(events, ContainerExited, "app").elapsed >= 0.8


async def test_an_engine_that_stays_away_is_unreachable_and_a_second_drain_finishes() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.3)
    ops.add("autoheal", "autoheal")
    ops.fail("signal", "autoheal", EngineUnavailable("gone", engine=ENGINE))

    async def away() -> None:
        await anyio.sleep(0.1)
        ops.down = True

    events: list[DrainEvent] = []
    caught: list[DrainUnreachable] = []

    async def delete() -> None:
        try:
            await drain_workloads(
                ops,
                [ops.snapshot(grace=1)],
                grace_period_seconds=None,
                emit=events.append,
                engine=ENGINE,
            )
        except DrainUnreachable as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(away)
        tg.start_soon(delete)
    [error] = caught
    assert isinstance(error, EngineUnavailable) and error.engine == ENGINE
    [summary] = error.summaries
    assert outcomes(summary) == {"app": ("unreachable", None)}
    assert len(summary.errors) == 1 and "engine unreachable" in summary.errors[0]
    assert "engine unreachable" in str(error)
    assert isinstance(events[-1], DrainFinished)
    assert ops.boxes["pause"].state == "paused"  # the first drain's claim is still there

    ops.down = False  # the engine is back; the app drained meanwhile
    again, events = await drain(relisted(ops), declared=1)
    assert outcomes(again) == {"app": ("already-exited", 0)}
    assert again.errors == ()
    assert all(b.state == "gone" for b in ops.boxes.values())


def relisted(ops: FakeOps) -> FakeOps:
    """A second delete's view of the same fake engine: what is left, as it is now."""
    ops.boxes = {n: b for n, b in ops.boxes.items() if b.state != "gone"}
    for box in ops.boxes.values():
        box.settle()
        box.ref = attrs.evolve(
            box.ref, running=box.running, paused=box.state == "paused", exit_code=box.exit_code
        )
    return ops


# --- two deletes at once ------------------------------------------------------------------------


async def test_a_second_delete_follows_the_first_and_never_signals() -> None:
    ops = pod(FakeOps())
    ops.add("a", drain=0.3)
    ops.add("b", drain=0.3)
    snapshot = ops.snapshot(grace=5)
    runs: list[tuple[DrainSummary, list[DrainEvent]]] = []

    async def delete() -> None:
        events: list[DrainEvent] = []
        [summary] = await drain_workloads(
            ops, [snapshot], grace_period_seconds=None, emit=events.append
        )
        runs.append((summary, events))

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete)
        tg.start_soon(delete)
    assert [s.errors for s, _ in runs] == [(), ()]
    assert len(ops.calls("signal", "a")) == 1 and len(ops.calls("signal", "b")) == 1
    assert [len(names(e, SignalSent)) for _, e in runs] == [2, 0]
    assert outcomes(runs[0][0]) == {"a": ("exited", 0), "b": ("exited", 0)}
    follower_summary, follower = runs[1]
    assert {o for o, _ in outcomes(follower_summary).values()} <= {"exited", "missing"}
    assert "PauseRemoved" in [type(e).__name__ for e in follower]
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_with_claims_as_records_a_second_delete_follows_and_nothing_is_paused() -> None:
    """Docker's claim: the record's volume. Two deletes at once: one claims and signals, the
    other finds the claim held and follows; no pause container is paused; both succeed."""
    ops = pod(FakeOps())
    ops.claim_is_record = True
    ops.add("a", drain=0.3)
    snapshot = ops.snapshot(grace=5)
    runs: list[tuple[DrainSummary, list[DrainEvent]]] = []

    async def delete() -> None:
        events: list[DrainEvent] = []
        [summary] = await drain_workloads(
            ops, [snapshot], grace_period_seconds=None, emit=events.append
        )
        runs.append((summary, events))

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete)
        tg.start_soon(delete)
    assert ops.calls("signal", "a") == [("signal", "a", "SIGTERM")]
    assert sorted(len(names(e, SignalSent)) for _, e in runs) == [0, 1]
    assert [s.errors for s, _ in runs] == [(), ()]
    assert ops.calls("write_claim") == []  # the claim was the record
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_a_stale_claim_is_taken_over_with_hooks_and_signals() -> None:
    """The pause is paused and holds no claim record (a user's ``docker pause``, or a deleter
    that died between its pause and its record): the follower takes over once no record has
    come for RECORD_WAIT and drains: the hook, then SIGTERM, and the app exits 0. (It used to
    SIGKILL it past the deadline, no hook and no signal.)"""
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.add("app", pre_stop=("drain",), hook=0.1, drain=0.2)
    summary, events = await drain(ops, declared=2)
    assert ops.calls("run_hook", "app") == [("run_hook", "app", "drain")]
    assert ops.calls("signal", "app") == [("signal", "app", "SIGTERM")]
    assert names(events, ContainerForceKilled) == []
    assert outcomes(summary) == {"app": ("exited", 0)} and summary.errors == ()
    assert first(events, SignalSent, "app").elapsed < 1.5  # RECORD_WAIT 0.3 + the hook
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_a_takeover_gives_a_full_grace_and_then_kills() -> None:
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.add("app", ignores_term=True)
    summary, events = await drain(ops, declared=1)
    assert ops.calls("signal", "app") == [
        ("signal", "app", "SIGTERM"),
        ("signal", "app", "SIGKILL"),
    ]
    killed = first(events, ContainerForceKilled, "app")
    assert killed.elapsed >= 1.3  # type: ignore[attr-defined]  # RECORD_WAIT 0.3 + grace 1
    assert outcomes(summary) == {"app": ("killed", 137)}


def live_record(grace: int, signalled: tuple[str, ...] = ()) -> _claim.ClaimRecord:
    """The record of a deleter in this very process (alive)."""
    me = _claim.Owner.this_process()
    return _claim.new_record(me, started=time.time(), grace=grace, signalled=signalled)


def dead_owner_record(grace: int, signalled: tuple[str, ...] = ()) -> _claim.ClaimRecord:
    """The record of a deleter on this host whose process has ended."""
    record = live_record(grace, signalled)
    owner = attrs.evolve(record.owner, pid=999_999_999)  # above any pid_max: it runs nowhere
    return attrs.evolve(record, owner=owner)


async def test_a_dead_owner_is_taken_over_at_once_and_its_signals_are_not_sent_again() -> None:
    """The record names a process of this host that is gone: no waiting. ``a`` was signalled by
    the dead owner (recorded before its signal): it gets no second SIGTERM, only its wait; ``b``
    gets its hook and its signal."""
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.add("a", drain=0.1)
    ops.add("b", pre_stop=("drain",), drain=0.1)
    ops.boxes["a"].exit_at = anyio.current_time() + 0.3  # draining since the dead owner's TERM
    ops.boxes["pause"].claim = dead_owner_record(30, ("a",))
    summary, events = await drain(ops, declared=5)
    assert ops.calls("signal", "a") == []
    assert ops.calls("signal", "b") == [("signal", "b", "SIGTERM")]
    assert outcomes(summary) == {"a": ("exited", 0), "b": ("exited", 0)}
    # at the follower's first check of the owner, record_wait (0.3 s here) in: a follower
    # checks no sooner (eight deleters of forty workloads read 280 records at once)
    assert first(events, SignalSent, "b").elapsed < 0.6


async def test_a_follower_waits_for_the_owners_longer_override_grace() -> None:
    """The owner drains with an override of 3 s (declared 1); the app needs 1.5 s. The
    follower reads the owner's grace from its record and never kills early (it used to take
    over at its own 1 s plus its margin and SIGKILL the app)."""
    ops = pod(FakeOps())
    ops.add("app", drain=1.5)
    snapshot = ops.snapshot(grace=1)
    runs: dict[str, DrainSummary] = {}

    async def delete(who: str, grace: int | None, delay: float) -> None:
        await anyio.sleep(delay)
        [runs[who]] = await drain_workloads(
            ops,
            [snapshot if who == "owner" else relisted_snapshot(ops)],
            grace_period_seconds=grace,
            emit=lambda e: None,
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete, "owner", 3, 0)
        tg.start_soon(delete, "follower", None, 0.1)
    assert outcomes(runs["owner"]) == {"app": ("exited", 0)}
    assert ops.calls("signal", "app") == [("signal", "app", "SIGTERM")]
    assert runs["follower"].errors == () and runs["owner"].errors == ()


def relisted_snapshot(ops: FakeOps) -> WorkloadSnapshot:
    """What a delete's own listing shows now (the pause paused by the owner)."""
    return WorkloadSnapshot(
        name="w",
        grace_period_seconds=1,
        containers=tuple(
            attrs.evolve(b.ref, running=b.running, paused=b.state == "paused")
            for b in ops.boxes.values()
            if b.state != "gone"
        ),
    )


async def test_a_slow_removal_by_a_live_owner_is_not_taken_over() -> None:
    """Everything has exited and the owner's removals are slow (Podman, loaded): the follower
    sees nothing change for longer than its old 2 s quiet window (here 0.3 s), but the owner
    beats, so it is not taken over: each container is removed once."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.delays[("remove", "app")] = 1.0
    snapshot = ops.snapshot(grace=5)

    async def delete(delay: float) -> None:
        await anyio.sleep(delay)
        await drain_workloads(
            ops,
            [snapshot if delay == 0 else relisted_snapshot(ops)],
            grace_period_seconds=None,
            emit=lambda e: None,
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete, 0)
        tg.start_soon(delete, 0.2)
    assert len(ops.calls("remove", "app")) == 1 and len(ops.calls("remove", "pause")) == 1
    assert ops.calls("signal", "app") == [("signal", "app", "SIGTERM")]


async def test_the_owner_signals_first_and_records_its_claim_once_after() -> None:
    """Nothing but the pause stands between the drain's start and its signals: the claim
    record is written once, ``record_delay`` later, naming what was signalled, and never
    rewritten (it was written before the first signal and again every second, per workload);
    it is dropped with the pause container."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.35)
    ops.add("other", drain=0.35)
    await drain(ops, grace=4, declared=1)
    calls = [c[0] for c in ops.log if c[0] != "exits"]
    assert calls[:3] == ["claim", "signal", "signal"], ops.log
    [write] = [i for i, c in enumerate(ops.log) if c[0] == "write_claim"]
    assert write > ops.log.index(("signal", "other", "SIGTERM"))
    assert ops.log.index(("remove", "pause", "")) < ops.log.index(("drop_claim", "pause", ""))
    assert ops.boxes["pause"].claim is None


async def test_a_drain_over_before_its_record_delay_writes_no_record() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.01)
    await drain(ops, grace=4, declared=1)
    assert ops.calls("write_claim") == [] and ops.calls("drop_claim") == []


async def test_a_follower_takes_over_at_once_when_nothing_runs() -> None:
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.add("app", state="exited", exit_code=0)
    ops.add("gone-by-hand")
    ops.boxes["gone-by-hand"].state = "gone"
    summary, _ = await drain(ops, declared=30)
    assert outcomes(summary) == {"app": ("already-exited", 0), "gone-by-hand": ("missing", None)}
    assert summary.seconds < 5 and summary.errors == ()
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_a_follower_sees_a_kill_and_a_removal() -> None:
    ops = pod(FakeOps())
    ops.add("app")
    snapshot = ops.snapshot(grace=5)
    ops.boxes["pause"].state = "paused"  # claimed by someone else after our listing
    events: list[DrainEvent] = []

    async def other_deleter() -> None:
        await anyio.sleep(0.1)
        ops.boxes["app"].die(137)
        await anyio.sleep(0.1)
        for name in ("app", "pause"):
            ops.boxes[name].state = "gone"

    async with anyio.create_task_group() as tg:
        tg.start_soon(other_deleter)
        [summary] = await drain_workloads(
            ops, [snapshot], grace_period_seconds=None, emit=events.append
        )
    assert outcomes(summary) == {"app": ("killed", 137)}
    assert names(events, ContainerRemoved) == ["app"] and names(events, PauseRemoved) == ["pause"]
    assert ops.calls("signal") == [] and ops.calls("remove") == []


async def test_a_follower_that_cannot_look_reports_it_and_touches_nothing() -> None:
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.add("app")
    ops.fail("look", "pause", refused("inspect", "pause"))
    summary, _ = await drain(ops, declared=5)
    assert summary.errors == ("follow w: [500] inspect pause: refused (engine=fake)",)
    assert ops.calls("signal") == [] and ops.calls("remove") == []


async def test_a_refused_claim_on_a_stopped_pause_drains_anyway() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.boxes["pause"].state = "exited"  # it died after the listing
    summary, _ = await drain(ops, declared=2)
    assert outcomes(summary) == {"app": ("exited", 0)} and summary.errors == ()
    assert ops.calls("look", "pause")  # claim refused: was it another delete? no


async def test_an_engine_that_cannot_pause_drains_unclaimed() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.fail("claim", "pause", refused("pause", "pause"))
    summary, _ = await drain(ops, declared=2)
    assert outcomes(summary) == {"app": ("exited", 0)}
    assert summary.errors == ()


async def test_a_pause_gone_before_the_claim_is_no_follower() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.fail("claim", "pause", WorkloadNotFound("gone", engine=ENGINE, status=404))
    summary, _ = await drain(ops, declared=2)
    assert outcomes(summary) == {"app": ("exited", 0)} and summary.errors == ()


# --- containers that go, and steps that fail ----------------------------------------------------


async def test_a_container_removed_by_hand_mid_drain_is_no_failure() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.add("doomed", drain=5)

    async def by_hand() -> None:
        await anyio.sleep(0.1)
        ops.boxes["doomed"].state = "gone"
        ops.boxes["doomed"].changed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(by_hand)
        summary, _ = await drain(ops, declared=2)
    assert outcomes(summary) == {"app": ("exited", 0), "doomed": ("missing", None)}
    assert summary.errors == ()


async def test_every_failing_step_is_a_line_and_the_drain_goes_on() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.add("stuck")
    ops.add("autoheal", "autoheal")
    ops.fail("remove", "autoheal", refused("remove", "autoheal"))
    ops.fail("signal", "stuck", refused("kill", "stuck"), refused("kill", "stuck"))
    ops.fail("remove", "app", refused("remove", "app"))
    ops.fail("remove_volumes", "w", refused("volumes", "w"))
    summary, events = await drain(ops, declared=1)
    assert summary.errors == (
        "remove autoheal: [500] remove autoheal: refused (engine=fake)",
        "stop stuck: [500] kill stuck: refused (engine=fake)",
        "remove app: [500] remove app: refused (engine=fake)",  # exited: removed at once
        "kill stuck: [500] kill stuck: refused (engine=fake)",
        "remove pause: [500] remove pause: container has dependent containers (engine=fake)",
        "remove volumes: [500] volumes w: refused (engine=fake)",
    )
    assert names(events, SidecarRemoved) == []
    assert isinstance(events[-1], DrainFinished)


async def test_a_pause_held_by_a_container_made_after_the_look_is_removed_once_it_is_free() -> None:
    """A create racing the delete made a container after the drain's look: the pause removal
    is refused for its dependents until that create's roll-back removes it; asked again, the
    drain ends without an error (seen on Podman in CI: "dependency exists")."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    held = WorkloadConflict("remove pause: dependency exists", engine="fake", status=500)
    ops.fail("remove", "pause", held, held)
    summary, events = await drain(ops, declared=1)
    assert summary.errors == ()
    assert len(ops.calls("remove", "pause")) == 3
    assert isinstance(events[-1], DrainFinished)


async def test_a_pause_held_by_its_own_unremoved_container_is_an_error_at_once() -> None:
    """A dependent the drain knows (its removal failed) is not waited for: one line."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.05)
    ops.fail("remove", "app", refused("remove", "app"))
    summary, _ = await drain(ops, declared=1)
    assert len(ops.calls("remove", "pause")) == 1
    assert summary.errors[-1].startswith("remove pause:")


async def test_a_kill_the_engine_does_not_confirm_in_time_leaves_the_outcome_unknown() -> None:
    ops = pod(FakeOps())
    ops.exit_stream = False  # the engine's wait is all there is to confirm it
    ops.add("stubborn", ignores_term=True)
    ops.hang.add(("wait_killed", "stubborn"))
    summary, _ = await drain(ops, grace=0)
    assert outcomes(summary) == {"stubborn": ("missing", None)}


async def test_an_exit_of_its_own_as_the_kill_lands_is_exited_with_its_code() -> None:
    """The engine took the deadline's SIGKILL, but the container had exited 0 on its own: the
    summary says ``exited 0`` (graceful), as the engine saw it; ``killed`` is for an exit the
    kill caused (137). It used to say ``killed`` whenever the kill call was accepted."""
    ops = pod(FakeOps())
    ops.add("app", ignores_term=True, exiting_at_kill=True)
    ops.add("stubborn", ignores_term=True)
    summary, events = await drain(ops, declared=1)
    assert outcomes(summary) == {"app": ("exited", 0), "stubborn": ("killed", 137)}
    assert sorted(names(events, ContainerForceKilled)) == ["app", "stubborn"]  # both were sent
    assert first(events, ContainerExited, "app").graceful  # type: ignore[attr-defined]
    assert not first(events, ContainerExited, "stubborn").graceful  # type: ignore[attr-defined]


async def test_a_survivor_that_went_before_its_kill_is_missing() -> None:
    ops = pod(FakeOps())
    ops.add("app", ignores_term=True)
    ops.fail("signal", "app", WorkloadNotFound("gone", engine=ENGINE, status=404))
    ops.fail("signal", "pause", WorkloadNotFound("gone", engine=ENGINE, status=404))
    summary, _ = await drain(ops, grace=0)
    assert outcomes(summary) == {"app": ("missing", None)}
    assert summary.errors == ()


async def test_a_container_that_had_exited_is_not_signalled_as_a_kill() -> None:
    ops = pod(FakeOps())
    ops.add("app", ignores_term=True)

    async def exits_on_its_own() -> None:
        await anyio.sleep(0.05)
        ops.boxes["app"].die(3)

    async with anyio.create_task_group() as tg:
        tg.start_soon(exits_on_its_own)
        ops.delays[("signal", "app")] = 0.1
        summary, events = await drain(ops, declared=2)
    assert outcomes(summary) == {"app": ("already-exited", 3)}
    assert names(events, SignalSent) == []


# --- the books ----------------------------------------------------------------------------------


def test_the_effective_grace_is_the_override_else_the_declared_else_the_default() -> None:
    assert _books.effective_grace(12, 0) == 0
    assert _books.effective_grace("12") == 12
    assert _books.effective_grace(None) == DEFAULT_GRACE_PERIOD_SECONDS == 30


def test_an_error_line_is_written_once() -> None:
    books = _books.DrainBooks(
        workload="w", grace=1, started=0.0, emit=lambda _: None, clock=lambda: 2.5
    )
    books.error("x")
    books.error("x")
    assert books.errors == ["x"] and books.elapsed() == 2.5 and books.deadline == 1


async def test_an_engine_away_from_the_start_gives_up_past_the_deadline() -> None:
    ops = pod(FakeOps())
    ops.add("app")
    ops.down = True
    events: list[DrainEvent] = []
    with pytest.raises(DrainUnreachable) as caught:
        await drain_workloads(
            ops, [ops.snapshot(grace=1)], grace_period_seconds=None, emit=events.append
        )
    [summary] = caught.value.summaries
    assert outcomes(summary) == {"app": ("unreachable", None)}
    assert 1.3 <= summary.seconds < 5  # the deadline, then GIVE_UP_AFTER (0.3 s here)
    assert isinstance(events[-1], DrainFinished)
    assert names(events, SignalSent) == [] and ops.boxes["app"].state == "running"


async def test_the_caller_gets_every_event_before_drain_unreachable() -> None:
    """The deployer hands on the whole stream, DrainFinished last, then raises the error (the
    CLI's ``--output json`` ends with DrainFinished, then exits 3), even when the driver raises
    right after its last event."""
    ops = pod(FakeOps())
    ops.add("app")
    ops.down = True
    events: list[DrainEvent] = []
    with pytest.raises(DrainUnreachable) as caught:
        await drain_workloads(
            ops, [ops.snapshot(grace=0)], grace_period_seconds=0, emit=events.append
        )

    class Driver:
        name = ENGINE

        async def find(self, names: list[str]) -> Found:
            return Found(names=tuple(names))

        async def drain(self, found: Found, *, grace_period_seconds: int | None, emit):  # type: ignore[no-untyped-def]
            for event in events:
                emit(event)
            raise caught.value

    seen: list[DrainEvent] = []
    with pytest.raises(DrainUnreachable):  # noqa: PT012 - raised as the stream ends
        async with Deployer(Driver()).terminate("w") as stream:  # type: ignore[arg-type]
            async for event in stream:
                seen.append(event)
    assert seen == events and isinstance(seen[-1], DrainFinished)


# --- issue 16: kill now at any moment, one stop signal, restarts, a slow stream --------------


async def cancelled_after(ops: FakeOps, seconds: float, **kw: object) -> list[DrainEvent]:
    """A drain cancelled (the caller's kill now) ``seconds`` in; its events."""
    events: list[DrainEvent] = []
    with anyio.move_on_after(seconds):
        await drain_workloads(
            ops,
            [ops.snapshot(grace=kw.get("declared", 30))],  # type: ignore[arg-type]
            grace_period_seconds=None,
            emit=events.append,
        )
    return events


async def test_kill_now_while_the_exit_stream_opens_kills_what_runs() -> None:
    """``/events`` is slow to open (5 s); the cancel at 0.1 s used to kill nothing and leave
    the workload running, its summary never written."""
    ops = pod(FakeOps())
    ops.add("app", ignores_term=True)
    ops.stream_delay = 5
    events = await cancelled_after(ops, 0.1)
    assert isinstance(events[-1], DrainFinished)
    assert outcomes(events[-1].summary) == {"app": ("killed", 137)}
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_a_short_grace_signals_at_once_however_slow_the_stream() -> None:
    """Grace 1 and an ``/events`` that takes 5 s to open: the app still gets SIGTERM at once and
    its exit is seen (the opening used to eat the whole grace: no SIGTERM at all)."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.2)
    ops.stream_delay = 5
    summary, events = await drain(ops, declared=1)
    assert first(events, SignalSent, "app").elapsed < 0.5
    assert outcomes(summary) == {"app": ("exited", 0)}
    assert names(events, ContainerForceKilled) == []


async def test_an_exit_before_the_stream_opened_is_seen() -> None:
    ops = pod(FakeOps())
    ops.add("app", drain=0.0)
    ops.stream_delay = 0.3
    summary, _ = await drain(ops, declared=5)
    assert outcomes(summary) == {"app": ("exited", 0)} and summary.seconds < 2


async def test_kill_now_while_following_kills_and_says_so() -> None:
    """A follower's kill now: the still-running app was reported ``missing`` and left
    running; now it is killed and reported ``killed``."""
    ops = FakeOps()
    ops.add("pause", "pause", state="paused")
    ops.boxes["pause"].claim = live_record(30)  # a live owner (this process)
    ops.add("app")
    events = await cancelled_after(ops, 0.5)
    summary = events[-1].summary  # type: ignore[attr-defined]
    assert outcomes(summary) == {"app": ("killed", 137)}
    assert all(b.state == "gone" for b in ops.boxes.values())


async def app_on_a_fake_driver(**behaviour: object) -> tuple[FakeDriver, Deployer]:
    """Workload ``w`` (declared grace 30 s) with one run container ``app``, through the deployer
    on asyncdeploy.testing's driver (whose drain is this drain)."""
    driver = FakeDriver()
    plan = WorkloadPlan(name="w", containers=[Container(name="app", image="any/image")])
    await Deployer(driver).create(plan)
    driver.script("w", "app", **behaviour)
    return driver, Deployer(driver)


async def test_kill_now_reports_what_really_happened() -> None:
    """A second Ctrl-C while the engine refuses a removal: the deployer raises DrainError with
    the summary (it used to collect summaries only from drain()'s return: after the cancel the
    list was empty and the CLI said everything was removed)."""
    driver, deployer = await app_on_a_fake_driver(ignores_term=True)
    driver.engine("w").fail("remove", "app", refused("remove", "app"))
    with pytest.raises(DrainError) as caught:  # noqa: PT012 - raised as the stream ends
        async with deployer.terminate("w") as drain:
            async for event in drain:
                if isinstance(event, SignalSent):
                    drain.kill()
    [summary] = caught.value.summaries
    assert outcomes(summary) == {"app": ("killed", 137)}
    assert "remove app" in summary.errors[0]


async def test_kill_now_with_the_engine_gone_is_unreachable() -> None:
    driver, deployer = await app_on_a_fake_driver(ignores_term=True)
    with pytest.raises(DrainUnreachable):  # noqa: PT012 - raised as the stream ends
        async with deployer.terminate("w") as drain:
            async for event in drain:
                if isinstance(event, SignalSent):
                    driver.engine("w").down = True
                    drain.kill()


async def test_kill_now_set_before_the_drain_began_kills() -> None:
    """The second Ctrl-C came during connect or find: the drain starts killed, at grace 0, and
    kills at once what ignores SIGTERM (it used to be cancelled before anything, and killed
    nothing). The workload declares 30 s: a drain that ignored the kill would wait them out."""
    driver, deployer = await app_on_a_fake_driver(ignores_term=True)
    ops = driver.engine("w")
    drain = deployer.terminate("w")
    drain.kill()
    started = anyio.current_time()
    async with drain:
        seen = [event async for event in drain]
    assert anyio.current_time() - started < 5  # not the declared 30 s
    assert isinstance(seen[0], DrainStarted) and seen[0].grace_period_seconds == 0
    assert isinstance(seen[-1], DrainFinished)
    assert outcomes(seen[-1].summary) == {"app": ("killed", 137)}
    assert all(b.state == "gone" for b in ops.boxes.values())


async def test_a_lost_answer_to_the_stop_signal_is_not_sent_again() -> None:
    """The kill landed but its answer was lost with the connection: ``_call`` used to send the
    SIGTERM again (the kit read the second one as "cut every stream now")."""
    ops = pod(FakeOps())
    ops.add("app", drain=0.2)
    ops.lose_answer.add(("signal", "app"))
    summary, events = await drain(ops, declared=5)
    assert ops.calls("signal", "app") == [("signal", "app", "SIGTERM")]
    assert names(events, SignalSent) == ["app"]
    assert outcomes(summary) == {"app": ("exited", 0)} and summary.errors == ()


async def test_a_lost_answer_to_podmans_stop_is_not_stopped_again() -> None:
    ops = pod(FakeOps())
    ops.kill_triggers_restart = True  # type: ignore[misc]
    ops.add("app", drain=0.2, restart_policy="always")
    ops.lose_answer.add(("stop", "app"))
    summary, _ = await drain(ops, declared=5)
    assert len(ops.calls("stop", "app")) == 1
    assert outcomes(summary) == {"app": ("exited", 0)}


async def test_a_container_restarted_during_its_hook_is_waited_for() -> None:
    """on-failure: the app crashes (exit 1) while its hook runs and is restarted; its old
    ``die`` must not end the wait for its new life (it was force-removed at once, ``exited
    1``): it gets SIGTERM and drains its 0.3 s."""
    ops = pod(FakeOps())
    ops.add(
        "app",
        pre_stop=("drain",),
        hook=0.2,
        drain=0.3,
        crash_in_hook=True,
        restarts=1,
        restart_policy="on-failure",
    )
    summary, events = await drain(ops, declared=5)
    assert outcomes(summary) == {"app": ("exited", 0)}
    # its hook ends with its crash at 0.1 s; then SIGTERM to its new life and its 0.3 s drain
    assert first(events, SignalSent, "app").elapsed >= 0.1
    assert first(events, ContainerExited, "app").elapsed >= 0.35  # type: ignore[attr-defined]


async def test_a_hook_that_stops_its_container_is_exited_not_already_exited() -> None:
    ops = pod(FakeOps())
    box = ops.add("app", pre_stop=("stop-myself",), hook=0.1)
    ops.boxes["app"].crash_in_hook = False

    async def stops_itself() -> None:
        await anyio.sleep(0.05)
        box.die(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(stops_itself)
        summary, events = await drain(ops, declared=5)
    assert outcomes(summary) == {"app": ("exited", 0)}
    assert names(events, SignalSent) == []  # none was sent: it had stopped


def test_a_claim_record_survives_its_labels_and_tells_a_dead_owner() -> None:
    record = live_record(45, ("a", "b"))
    labels = _claim.claim_labels("abc", record)
    assert _claim.ClaimRecord.from_json(labels[LABEL_CLAIM_RECORD]) == record
    assert labels[LABEL_CLAIM] == "abc"
    assert record.owner.alive() is True
    assert dead_owner_record(45).owner.alive() is False
    elsewhere = attrs.evolve(record.owner, host="another-host")
    assert elsewhere.alive() is None  # trusted until its deadline plus the owner bound
    assert _claim.ClaimRecord.from_json(b'{"owner": 1}') is None


async def test_two_deletes_on_an_engine_that_cannot_pause_signal_once() -> None:
    """No cgroup freezer: both deletes drained unclaimed and both sent SIGTERM. The claim
    record decides instead: one drains, the other follows."""
    ops = pod(FakeOps())
    ops.add("a", drain=0.3)
    snapshot = ops.snapshot(grace=5)
    for _ in range(2):
        ops.fail("claim", "pause", refused("pause", "pause"))
    summaries: list[DrainSummary] = []

    async def delete() -> None:
        summaries.extend(
            await drain_workloads(ops, [snapshot], grace_period_seconds=None, emit=lambda e: None)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete)
        tg.start_soon(delete)
    assert ops.calls("signal", "a") == [("signal", "a", "SIGTERM")]
    assert [s.errors for s in summaries] == [(), ()]
    assert all(b.state == "gone" for b in ops.boxes.values())
