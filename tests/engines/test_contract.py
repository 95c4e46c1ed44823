"""The driver contract, run against every real container engine."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy import (
    Autoheal,
    Container,
    ContainerForceKilled,
    CreateError,
    Deployer,
    DrainError,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    EngineAPIError,
    Mount,
    PauseRemoved,
    SidecarRemoved,
    SignalSent,
    WorkloadNotFound,
)
from asyncdeploy.labels import LABEL_PLAN_DIGEST, LABEL_WORKLOAD
from asyncdeploy.plan import plan_digest
from tests.engines.conftest import BUSYBOX, ENGINES, PYTHON, ROOTLESS_PODMAN, open_engine
from tests.engines.helpers import graceful, plan, read_markers, started
from tests.polling import until

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[*ENGINES, ROOTLESS_PODMAN])
async def deployer(request: pytest.FixtureRequest) -> AsyncIterator[Deployer]:
    """A deployer on each real engine, rootless Podman too."""
    async for opened in open_engine(request.param):
        yield opened


# A grace the product must not wait for: a drain that did would outlast the test's own bound
# (tests/timeouts.py), while killing at once takes seconds even on a loaded machine.
GRACE_NOT_WAITED = 300
AUTOHEAL_SCRIPT = (Path(__file__).parent.parent / "images" / "autoheal.py").read_text()


async def drain_events(
    deployer: Deployer, name: str, grace: int | None = None
) -> tuple[list[DrainEvent], float]:
    started = time.monotonic()
    async with deployer.terminate(name, grace_period_seconds=grace) as events:
        collected = [event async for event in events]
    return collected, time.monotonic() - started


def outcomes(events: list[DrainEvent]) -> dict[str, tuple[str, int | None]]:
    [finished] = [e for e in events if isinstance(e, DrainFinished)]
    return {c.name: (c.outcome, c.exit_code) for c in finished.summary.containers}


async def leftovers(deployer: Deployer, name: str) -> list[str]:
    try:
        status = await deployer.get(name)
    except WorkloadNotFound:
        return []
    return [c.name for c in status.containers]


async def test_sigterm_handler_completes(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The seed's reproduction, inverted: the TERM handler runs to its end before removal."""
    workload = name("marker")
    await deployer.create(
        plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=10)
    )
    await deployer.wait_ready(workload, timeout=30)
    await started(markers, "app")
    events, _ = await drain_events(deployer, workload)
    assert [m for _, m in read_markers(markers)] == ["start", "got-TERM", "drained-ok"]
    assert outcomes(events) == {"app": ("exited", 0)}
    assert await leftovers(deployer, workload) == []


async def test_containers_drain_concurrently_under_one_deadline(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Three containers needing 3 s each, grace 8: all signalled at once, so every SIGTERM goes
    out before any container has finished its drain (one after another, the first would have
    exited 3 s before the second was signalled), and all exit by themselves. How long it takes
    is the benchmark's figure."""
    workload = name("three")
    containers = [graceful(f"r{i}", 3, markers) for i in range(3)]
    await deployer.create(plan(workload, containers, termination_grace_period_seconds=8))
    await deployer.wait_ready(workload, timeout=30)
    await started(markers, "r0", "r1", "r2")
    events, seconds = await drain_events(deployer, workload)
    assert outcomes(events) == {f"r{i}": ("exited", 0) for i in range(3)}
    assert sorted(m for m in read_markers(markers) if m[1] == "drained-ok") == [
        (f"r{i}", "drained-ok") for i in range(3)
    ]
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("SignalSent") == 3, kinds
    last_signal = max(i for i, kind in enumerate(kinds) if kind == "SignalSent")
    assert last_signal < kinds.index("ContainerExited"), kinds  # in the drain's own order
    marks = [mark for _, mark in read_markers(markers) if mark != "start"]
    assert marks == ["got-TERM"] * 3 + ["drained-ok"] * 3, marks  # in the containers' order
    assert not [e for e in events if isinstance(e, ContainerForceKilled)], events
    assert seconds > 2.9  # each drained its whole 3 s


async def test_container_ignoring_sigterm_is_killed_at_the_deadline(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """A container that ignores SIGTERM with grace 2 is killed at its deadline (not before:
    the drain says so) and reported killed."""
    workload = name("stubborn")
    await deployer.create(
        plan(
            workload, [graceful("app", 1, markers, ignore=True)], termination_grace_period_seconds=2
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    events, seconds = await drain_events(deployer, workload)
    assert outcomes(events) == {"app": ("killed", 137)}
    [kill] = [e for e in events if isinstance(e, ContainerForceKilled)]
    assert kill.reason == "deadline"  # the drain's own clock had reached the deadline
    assert kill.elapsed >= 1.9 and seconds >= 1.9
    [drain] = [e for e in events if isinstance(e, DrainStarted)]
    assert drain.grace_period_seconds == 2


async def test_grace_zero_kills_at_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Grace 0 sends SIGKILL straight away: no TERM, no handler."""
    workload = name("now")
    await deployer.create(
        plan(workload, [graceful("app", 5, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(workload, timeout=30)
    await started(markers, "app")
    events, _ = await drain_events(deployer, workload, grace=0)
    assert outcomes(events) == {"app": ("killed", 137)}
    assert not [e for e in events if isinstance(e, SignalSent)]
    assert [m for _, m in read_markers(markers)] == ["start"]
    [kill] = [e for e in events if isinstance(e, ContainerForceKilled)]
    assert kill.reason == "deadline"  # grace 0: the deadline is the drain's start


async def test_grace_comes_from_the_plan_when_the_call_gives_none(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The plan's grace period is recorded at create time and used by a delete without one."""
    workload = name("label")
    await deployer.create(
        plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=7)
    )
    status = await deployer.get(workload)
    assert status.grace_period_seconds == 7
    events, _ = await drain_events(deployer, workload)
    [started] = [e for e in events if isinstance(e, DrainStarted)]
    assert started.grace_period_seconds == 7


async def test_exited_init_and_vanished_container_are_no_error(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Init containers that already exited, and one removed behind the driver's back."""
    workload = name("gone")
    init = Container(
        name="setup", role="init", image=BUSYBOX, command=["sh", "-c", "echo init-done"]
    )
    p = plan(
        workload,
        [init, graceful("app", 1, markers), graceful("doomed", 1, markers)],
        termination_grace_period_seconds=5,
    )
    await deployer.create(p)
    await deployer.wait_ready(workload, timeout=30)
    assert "init-done" in "".join([c async for c in deployer.logs(workload, container="setup")])
    # Remove "doomed" behind the deployer's back, between its listing and its signal.
    driver = deployer.driver
    original_signal = driver.ops.signal  # type: ignore[attr-defined]

    async def signal_after_removal(ref, sig):  # type: ignore[no-untyped-def]
        if ref.name == "doomed":
            await driver.session.client.containers.container(ref.id).delete(force=True)  # type: ignore[attr-defined]
        return await original_signal(ref, sig)

    driver.ops.signal = signal_after_removal  # type: ignore[attr-defined]
    try:
        summary = await deployer.delete(workload)
    finally:
        del driver.ops.signal  # type: ignore[attr-defined]
    got = {c.name: c.outcome for c in summary.containers}
    assert got == {"setup": "already-exited", "app": "exited", "doomed": "missing"}
    assert summary.errors == ()
    assert await leftovers(deployer, workload) == []


async def test_autoheal_is_removed_before_any_signal_and_pause_last(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """A real autoheal sidecar resurrects a container that exits under it; the drain removes it
    first, so the draining container is not resurrected, and the pause container goes last.
    (Rootless Podman here cannot pause, so its drain claims by record and takes the workload
    over: that path signalled the app before the autoheal was gone, 1 run in 3.)"""
    workload = name("heal")
    sidecar = Autoheal(image=PYTHON, command=["python3", "-c", AUTOHEAL_SCRIPT], interval_seconds=1)
    p = plan(
        workload,
        [graceful("app", 2, markers)],
        termination_grace_period_seconds=10,
        autoheal=sidecar,
    )
    await deployer.create(p)
    await deployer.wait_ready(workload, timeout=30)
    status = await deployer.get(workload)
    assert {c.role for c in status.containers} == {"pause", "run", "autoheal"}

    # The negative control: with the sidecar running, an exit is undone.
    app_id = await deployer.driver._container_id(workload, "app")  # type: ignore[attr-defined]
    await deployer.driver.session.client.containers.container(app_id).kill(signal="SIGTERM")  # type: ignore[attr-defined]
    await started(markers, "app", times=2, timeout=15)  # restarted, its TERM trap set

    async def app_running() -> bool:
        app = [c for c in (await deployer.get(workload)).containers if c.name == "app"]
        return [c.state for c in app] == ["running"]

    # ...and the engine says so too: the restarted app writes its marker before the engine
    # records it running, and a drain that looked in between found it exited (so it was not
    # signalled: a clean-clone run on Docker saw no SignalSent)
    await until(app_running, timeout=15, interval=0.1)

    events, _ = await drain_events(deployer, workload)
    kinds = [type(e).__name__ for e in events]
    first_signal = kinds.index("SignalSent")
    assert kinds.index("SidecarRemoved") < first_signal, kinds
    assert next(e for e in events if isinstance(e, SidecarRemoved)).container == "autoheal"
    assert isinstance([e for e in events if not isinstance(e, DrainFinished)][-1], PauseRemoved)
    # Not resurrected by the drain: still two starts, and the second run drained completely.
    marks = [m for _, m in read_markers(markers)]
    assert marks.count("start") == 2
    assert marks[-1] == "drained-ok"
    assert outcomes(events)["app"] == ("exited", 0)
    assert await leftovers(deployer, workload) == []


async def test_cancelled_delete_still_cleans_up(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """A caller cancelling mid-drain leaves nothing with the workload's label behind: the
    containers that ignore SIGTERM are killed then, not at the deadline (so far off that no
    load on the machine comes near it)."""
    workload = name("cancel")
    p = plan(
        workload,
        [graceful("a", 1, markers, ignore=True), graceful("b", 1, markers, ignore=True)],
        termination_grace_period_seconds=GRACE_NOT_WAITED,
    )
    await deployer.create(p)
    await deployer.wait_ready(workload, timeout=30)
    seen: list[DrainEvent] = []
    with anyio.move_on_after(1) as scope:
        async with deployer.terminate(workload) as events:
            async for event in events:
                seen.append(event)
    assert scope.cancelled_caught
    assert any(isinstance(e, SignalSent) for e in seen)
    [drain] = [e for e in seen if isinstance(e, DrainStarted)]
    assert time.time() < drain.deadline, "cancellation must not wait for the grace"
    engine_left = await deployer.driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]
    assert engine_left == []


async def test_unchanged_plan_is_a_no_op_and_a_changed_one_replaces(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Creating the same plan twice changes nothing; a new grace period replaces gracefully."""
    workload = name("apply")
    p = plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=5)
    first = await deployer.create(p)
    await started(markers, "app")
    assert first.action == "created"
    again = await deployer.create(p)
    assert again.action == "unchanged"
    assert [m for _, m in read_markers(markers)] == ["start"]
    changed = plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=6)
    replaced = await deployer.create(changed)
    assert replaced.action == "replaced"
    assert replaced.replaced is not None
    assert {c.outcome for c in replaced.replaced.containers} == {"exited"}
    assert (await deployer.get(workload)).grace_period_seconds == 6


async def test_a_replacement_whose_drain_fails_creates_nothing(
    deployer: Deployer, name: Callable[[str], str], markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed plan whose old workload cannot be removed raises the DrainError and creates
    nothing (as on Kubernetes): what is left of the old one may still hold its ports and names."""
    workload = name("stuck")
    old = plan(workload, [graceful("app", 0, markers)], termination_grace_period_seconds=5)
    await deployer.create(old)
    driver: Any = deployer.driver
    remove = driver.ops.remove

    async def refuse_app(ref: Any) -> None:
        if ref.name == "app":
            raise EngineAPIError("remove app: refused by the test", engine=driver.name, status=500)
        await remove(ref)

    monkeypatch.setattr(driver.ops, "remove", refuse_app)
    changed = plan(workload, [graceful("app", 0, markers)], termination_grace_period_seconds=6)
    with pytest.raises(DrainError, match="refused by the test"):
        await deployer.create(changed)
    monkeypatch.undo()
    left = await driver.session.containers({LABEL_WORKLOAD: workload})
    assert left, "the container that could not be removed is still there"
    assert {c["Labels"][LABEL_PLAN_DIGEST] for c in left} == {plan_digest(old)}


async def test_failing_init_container_fails_create_and_cleans_up(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """A failing init container fails the create with its exit code and logs; nothing is left."""
    workload = name("init")
    init = Container(
        name="setup",
        role="init",
        image=BUSYBOX,
        command=["sh", "-c", "echo broken-config >&2; exit 3"],
    )
    with pytest.raises(CreateError) as caught:
        await deployer.create(plan(workload, [init, graceful("app", 1, markers)]))
    assert caught.value.exit_code == 3
    assert "broken-config" in caught.value.logs
    assert await leftovers(deployer, workload) == []
    assert read_markers(markers) == [], "no run container may start after a failed init"


async def test_delete_all_drains_every_workload_at_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Two workloads draining 2 s each are drained together, not one after the other: both
    apps have their SIGTERM before either has finished its drain (in the containers' own
    order of markers)."""
    group = {"group": name("grp")}
    names = [name("all"), name("all")]
    for n in names:
        await deployer.create(
            plan(
                n,
                [graceful("app", 2, markers)],
                termination_grace_period_seconds=5,
                extra_labels=group,
            )
        )
    for n in names:
        await deployer.wait_ready(n, timeout=30)
    summaries = await deployer.delete_all(group)
    assert sorted(s.workload for s in summaries) == sorted(names)
    assert all(c.outcome == "exited" for s in summaries for c in s.containers)
    marks = [mark for _, mark in read_markers(markers) if mark != "start"]
    assert marks == ["got-TERM"] * 2 + ["drained-ok"] * 2, marks  # one after another: alternating


async def test_missing_workload_is_a_clear_not_found(deployer: Deployer) -> None:
    """delete of an unknown name says so; delete-all of nothing is not an error."""
    with pytest.raises(WorkloadNotFound, match="no-such-workload"):
        await deployer.delete("no-such-workload")
    assert await deployer.delete_all({"no-such-label": "x"}) == []


async def test_exec_logs_and_masked_inspect(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """exec runs in the container; inspect masks secret-looking env values."""
    workload = name("exec")
    app = graceful("app", 1, markers)
    app = attrs.evolve(app, env={**app.env, "API_TOKEN": "hunter2", "MODEL": "tiny"})
    await deployer.create(plan(workload, [app]))
    await deployer.wait_ready(workload, timeout=30)
    result = await deployer.exec(workload, ["sh", "-c", "echo $MODEL; exit 4"])
    assert (result.exit_code, result.output.strip()) == (4, "tiny")
    details = await deployer.inspect(workload)
    env = details["containers"]["app"]["Config"]["Env"]
    assert "API_TOKEN=****" in env and "MODEL=tiny" in env
    assert "hunter2" not in str(details)


async def test_restart_policy_does_not_resurrect_a_drained_container(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The engine's kill with the stop signal keeps ``restart_policy: always`` from restarting."""
    workload = name("always")
    app = graceful("app", 1, markers, restart_policy="always")
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=5))
    await deployer.wait_ready(workload, timeout=30)
    await started(markers, "app")
    summary = await deployer.delete(workload)
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("exited", 0)]
    assert [m for _, m in read_markers(markers)].count("start") == 1


async def test_workload_volumes_are_removed_and_others_kept(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """A volume the workload created goes with it; a volume that existed before stays."""
    workload = name("vol")
    client = deployer.driver.session.client  # type: ignore[attr-defined]
    kept = f"{workload}-kept"
    await client.volumes.create({"Name": kept})
    own = f"{workload}-cache"
    app = attrs.evolve(
        graceful("app", 1, markers),
        mounts=[
            *graceful("app", 1, markers).mounts,
            Mount(type="volume", source=own, target="/cache"),
            Mount(type="volume", source=kept, target="/models", read_only=True),
        ],
    )
    try:
        await deployer.create(plan(workload, [app]))
        await deployer.wait_ready(workload, timeout=30)
        result = await deployer.exec(workload, ["sh", "-c", "echo ok > /cache/x && cat /cache/x"])
        assert result.output.strip() == "ok"
        await deployer.delete(workload)
        names = {v["Name"] for v in (await client.volumes.list())["Volumes"] or []}
        assert own not in names
        assert kept in names
    finally:
        await (await client.volumes.get(kept)).delete()


async def test_logs_follow_until_the_container_stops(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Following logs yields lines as they are written and ends when the container exits."""
    workload = name("logs")
    talker = Container(
        name="talker",
        image=BUSYBOX,
        command=["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 0.3; done; sleep 0.5"],
    )
    await deployer.create(plan(workload, [talker]))
    with anyio.fail_after(20):
        text = "".join([chunk async for chunk in deployer.logs(workload, follow=True)])
    assert [line for line in text.splitlines() if line] == ["line-1", "line-2", "line-3"]
