"""The drain's claim, Podman's stop and named volumes, on real engines (issue 16): a stale
claim is drained, not killed; a short time left still delivers SIGTERM; a named volume is
shared across replace and goes with the last instance (or is kept)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from asyncdeploy import Container, Deployer, Mount, WorkloadNotFound, WorkloadPlan
from asyncdeploy._events import DrainFinished, PreStopFinished, SignalSent
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._ops import CallNotSent
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.drivers.engine._state import snapshot
from asyncdeploy.labels import LABEL_ROLE, LABEL_VOLUME_PLAN, LABEL_WORKLOAD
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import graceful, plan, read_markers
from tests.polling import until

pytestmark = pytest.mark.anyio

# The app's shell (not PID 1: the pause container's namespace is shared) exits 1 on USR1
# until /out/crashed exists; its restarted life is the graceful server.
CRASHES_ONCE = (
    "echo $$ > /out/pid; trap 'exit 1' USR1; "
    "if [ -e /out/crashed ]; then exec graceful app 2; fi; graceful app 2 & wait"
)


async def _pause_by_hand(deployer: Deployer, workload: str) -> None:
    """What a user's ``docker pause``, or a deleter killed right after its claim, leaves."""
    driver = deployer.driver
    items = await driver.session.containers({LABEL_WORKLOAD: workload, LABEL_ROLE: "pause"})  # type: ignore[attr-defined]
    [pause] = items
    await driver.session.client.containers.container(pause["Id"]).pause()  # type: ignore[attr-defined]


async def test_a_stale_claim_is_drained_with_its_hook_and_signal(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The pause container is paused and nobody drains (no claim record): the delete takes
    over after a few seconds and drains: the hook runs, the app gets SIGTERM and exits 0 after
    its 2 s drain. On the old code it was SIGKILLed 12 s later without any signal."""
    workload = name("stale")
    hooked = graceful("app", 2, markers, pre_stop=["sh", "-c", "echo app hook-ran >> /out/markers"])
    await deployer.create(plan(workload, [hooked], termination_grace_period_seconds=10))
    await deployer.wait_ready(workload, timeout=30)
    await _pause_by_hand(deployer, workload)
    summary = await deployer.delete(workload)
    [app] = summary.containers
    assert (app.outcome, app.exit_code) == ("exited", 0), summary
    assert summary.errors == ()
    marks = Counter(read_markers(markers))
    assert marks[("app", "hook-ran")] == 1 and marks[("app", "got-TERM")] == 1, marks
    assert marks[("app", "drained-ok")] == 1, marks
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)


async def test_a_short_time_left_still_delivers_the_stop_signal(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Grace 2, a 1.6 s hook, a restart policy (Podman stops such containers with its stop
    call): about 0.4 s is left for the stop. ``t=int(0.4)`` was 0 on Podman: SIGKILL, no
    SIGTERM, reported as a graceful ``exited 137``. Now the app gets SIGTERM and is then killed
    at the deadline (its drain takes 5 s), reported ``killed``."""
    workload = name("short")
    app = graceful("app", 5, markers, pre_stop=["sleep", "1.6"], restart_policy="on-failure")
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=2))
    await deployer.wait_ready(workload, timeout=30)
    async with deployer.terminate(workload) as stream:
        events = [event async for event in stream]
    [hook] = [e for e in events if isinstance(e, PreStopFinished)]
    [finished] = [e for e in events if isinstance(e, DrainFinished)]
    [got] = finished.summary.containers
    assert got.outcome == "killed", finished.summary  # it drains 5 s: the deadline kills it
    if not hook.timed_out:  # (a machine so loaded that the hook overran the deadline: no time)
        [sent] = [e for e in events if isinstance(e, SignalSent)]
        assert sent.container == "app"
        if 2 - sent.elapsed >= 0.25:  # time for its trap to run before the deadline's SIGKILL
            await until(lambda: ("app", "got-TERM") in read_markers(markers), timeout=5)


async def test_a_container_restarted_during_its_hook_is_waited_for(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """``on-failure``: the app crashes (exit 1) while its hook runs and is restarted. Its old
    ``die`` must not end the wait for its new life (it was force-removed at once, reported
    ``exited 1``), and its hook, whose exec Docker leaves open across the restart, must not
    hold the signal until the deadline: the restarted app gets SIGTERM and drains its 2 s.
    (Or the engine takes the drain's stop as a reason not to restart it: down, reported so.)"""
    workload = name("restart")
    app = Container(
        name="app",
        image=BUSYBOX,
        # first life: a shell that exits 1 on USR1; the restarted one: the graceful server
        command=["sh", "-c", CRASHES_ONCE],
        env={"MARKER_FILE": "/out/markers"},
        mounts=[Mount(source=str(markers), target="/out")],
        restart_policy="on-failure",
        pre_stop=["sh", "-c", "touch /out/crashed; kill -USR1 $(cat /out/pid); sleep 5"],
    )
    # a grace long enough that a drain held to its deadline cannot pass for a quick one
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=60))
    await deployer.wait_ready(workload, timeout=30)
    await until(lambda: ("app", "start") in read_markers(markers), timeout=10)
    summary = await deployer.delete(workload)
    [got] = summary.containers
    marks = Counter(read_markers(markers))
    if marks[("app", "start")] == 1:
        # Not restarted: the drain's stop (Podman's stop call, or Docker's kill during its
        # restart back-off) came first and the engine kept it down: exit 1, seen at once (a
        # cut hook made Podman's wait last until the deadline). Or restarted, and its new life
        # got the drain's SIGTERM before it wrote its start (seen on a loaded machine: 143).
        restarted_then_signalled = (markers / "crashed").exists() and got.exit_code == 143
        assert got.outcome == "exited", summary
        assert got.exit_code == 1 or restarted_then_signalled, summary
        assert summary.seconds < summary.grace_period_seconds / 2, summary
        return
    assert marks[("app", "start")] == 2, (marks, summary)  # crashed once, restarted once
    assert marks[("app", "got-TERM")] == 1 and marks[("app", "drained-ok")] == 1, marks
    assert (got.outcome, got.exit_code) == ("exited", 0), summary


@pytest.mark.skipif(
    not hasattr(WorkloadPlan, "instance_of"),
    reason="main's replace refuses its own mark as a reserved plan label (the replace branch "
    "fixes it with a plan field, instance_of)",
)
async def test_a_named_volume_is_shared_across_replace_and_goes_with_the_last_instance(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """``replace`` of a plan with a named volume: the old instance's drain succeeds (it failed
    with "volume is in use"), the new instance keeps the data, and the volume is removed with
    the last instance (it leaked, labelled with the old name)."""
    workload = name("vol")
    volume = f"{workload}-data"
    writer = Container(
        name="app",
        image=BUSYBOX,
        command=["sh", "-c", "echo kept > /data/file; exec graceful app 0"],
        env={"MARKER_FILE": "/out/markers"},
        mounts=[
            Mount(source=str(markers), target="/out"),
            Mount(type="volume", source=volume, target="/data"),
        ],
    )
    first = plan(workload, [writer], termination_grace_period_seconds=5)
    await deployer.create(first)
    await deployer.wait_ready(workload, timeout=30)
    result = await deployer.replace(first, ready_timeout=30)
    assert [s.errors for s in result.drained] == [()]
    client = deployer.driver.session.client  # type: ignore[attr-defined]
    info = await client.volumes.get(volume)
    assert (await info.show())["Labels"].get(LABEL_VOLUME_PLAN) == workload
    read = await deployer.exec(result.new.name, ["cat", "/data/file"])
    assert read.output.strip() == "kept"
    summary = await deployer.delete(result.new.name)
    assert summary.errors == ()
    listed = await client.volumes.list(filters={"name": [volume]})
    assert [v["Name"] for v in listed.get("Volumes") or [] if v["Name"] == volume] == []


async def test_a_kept_volume_stays(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workload = name("keep")
    volume = f"{workload}-data"
    app = graceful("app", 0, markers)
    app = Container(
        name=app.name,
        image=app.image,
        command=app.command,
        env=app.env,
        mounts=[*app.mounts, Mount(type="volume", source=volume, target="/data", keep=True)],
    )
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=5))
    client = deployer.driver.session.client  # type: ignore[attr-defined]
    try:
        summary = await deployer.delete(workload)
        assert summary.errors == ()
        info = await client.volumes.get(volume)
        assert (await info.show())["Name"] == volume
    finally:
        await (await client.volumes.get(volume)).delete()


async def test_a_signal_that_never_left_is_told_from_one_whose_answer_was_lost(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """No engine at the address (its socket gone while it restarts): the stop signal surely
    did not land (``CallNotSent``: the drain may send it again); the app got nothing."""
    workload = name("unsent")
    await deployer.create(plan(workload, [graceful("app", 0, markers)]))
    await until(lambda: ("app", "start") in read_markers(markers), timeout=10)
    listed = await deployer.driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]
    [app] = [r for r in snapshot(workload, listed).containers if r.name == "app"]
    missing = f"unix://{tmp_path / 'restarting.sock'}"
    engine = deployer.driver_name
    away = EngineSession.open(missing, engine=engine).variant(engine, "")
    try:
        with pytest.raises(CallNotSent):
            await EngineContainerOps(away).signal(app, "SIGTERM")
    finally:
        await away.aclose()
    assert ("app", "got-TERM") not in read_markers(markers)


async def test_a_hook_that_stops_its_container_is_an_exit_of_the_drain(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The hook itself stops the app (it sends it TERM): an exit of the drain, ``exited 0``,
    with no stop signal of ours. Podman reported it ``already-exited``, as if it had been
    down before the delete."""
    workload = name("selfstop")
    app = Container(
        name="app",
        image=BUSYBOX,
        command=["sh", "-c", "echo $$ > /out/pid; exec graceful app 0"],
        env={"MARKER_FILE": "/out/markers"},
        mounts=[Mount(source=str(markers), target="/out")],
        pre_stop=["sh", "-c", "kill -TERM $(cat /out/pid); sleep 2"],
    )
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=10))
    await until(lambda: ("app", "start") in read_markers(markers), timeout=10)
    summary = await deployer.delete(workload)
    [got] = summary.containers
    assert (got.outcome, got.exit_code) == ("exited", 0), summary
    assert Counter(read_markers(markers))[("app", "got-TERM")] == 1


async def test_a_delete_killed_before_its_record_is_taken_over_without_a_second_signal(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The deleter is SIGKILLed right after its SIGTERM went out, before it wrote its claim
    record (book-keeping comes after the signals). The next delete finds the pause paused and
    no record: it takes over after ``record_wait``, reads the engine's own kill events, sends
    no second SIGTERM (the app would read it as "cut every stream now"), and the app exits 0
    after its drain."""
    workload = name("early")
    await deployer.create(
        plan(workload, [graceful("app", 8, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(deployer.driver_name, "delete", workload, "-o", "json")
    await cli.next_event("SignalSent")
    cli.send(signal.SIGKILL)
    await cli.finish()
    summary = await deployer.delete(workload)
    [app] = summary.containers
    assert (app.outcome, app.exit_code) == ("exited", 0), summary
    marks = Counter(read_markers(markers))
    assert marks[("app", "got-TERM")] == 1 and marks[("app", "drained-ok")] == 1, marks
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)
