"""The drain on real engines when things go wrong: hooks that hang or fail, grace 0's kills,
two deletes of one workload at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Container, Deployer, DrainSummary, WorkloadNotFound, open_deployer
from asyncdeploy.drivers.engine._state import snapshot
from asyncdeploy.labels import LABEL_WORKLOAD
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import graceful, plan, read_markers

pytestmark = pytest.mark.anyio


async def test_one_hung_hook_holds_back_no_other_container(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Each container's hook, signal and exit run on their own: the container whose hook fails
    at once is signalled and exits 0 long before the deadline the hung hook runs into."""
    workload = name("hooks")
    hung = Container(
        name="hung", image=BUSYBOX, command=["sleep", "600"], pre_stop=["sleep", "600"]
    )
    quick = graceful("quick", 0, markers, pre_stop=["sh", "-c", "exit 3"])
    await deployer.create(plan(workload, [hung, quick], termination_grace_period_seconds=8))
    await deployer.wait_ready(workload, timeout=30)
    summary = await deployer.delete(workload)
    got = {c.name: c for c in summary.containers}
    assert (got["quick"].outcome, got["quick"].exit_code) == ("exited", 0)
    # exited 0 by itself: held back to the hung hook's deadline, it would have been killed there
    # with the hung one (the deadline kills every container still running)
    assert got["hung"].outcome == "killed"
    assert got["quick"].seconds is not None and got["hung"].seconds is not None
    assert got["quick"].seconds < got["hung"].seconds
    assert ("quick", "drained-ok") in read_markers(markers)


async def test_grace_0_reports_every_container_killed(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Killed directly or through the pause container killed with them: ``killed``, every time
    (the race between the two showed as ``exited, 137`` in about half the runs on Docker)."""
    for attempt in range(5):
        workload = name(f"zero{attempt}")
        containers = [graceful(f"c{i}", 5, markers) for i in range(6)]
        await deployer.create(plan(workload, containers, termination_grace_period_seconds=30))
        await deployer.wait_ready(workload, timeout=30)
        summary = await deployer.delete(workload, grace_period_seconds=0)
        assert [(c.outcome, c.exit_code) for c in summary.containers] == [("killed", 137)] * 6


async def test_two_deletes_at_once_drain_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Two operators delete the same workload at once: one drains it, the other follows it. Each
    container gets one SIGTERM and exits 0 after its 2 s drain (a second TERM made it drain
    twice and be killed); both deletes succeed and nothing is left."""
    workload = name("twice")
    await deployer.create(
        plan(
            workload,
            [graceful("a", 2, markers), graceful("b", 2, markers)],
            termination_grace_period_seconds=10,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    summaries: list[DrainSummary] = []

    async def delete() -> None:
        async with open_deployer(deployer.driver_name) as operator:
            summaries.append(await operator.delete(workload))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(delete)
            tg.start_soon(delete)
    assert [s.errors for s in summaries] == [(), ()]
    for summary in summaries:
        assert all(c.outcome in ("exited", "missing") for c in summary.containers), summary
        assert all(c.exit_code in (0, None) for c in summary.containers), summary
    marks = Counter(read_markers(markers))
    for container in ("a", "b"):
        assert marks[(container, "got-TERM")] == 1, marks
        assert marks[(container, "drained-ok")] == 1, marks
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)


async def test_a_removal_already_in_progress_is_waited_for_not_a_failure(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Three removals of one container at once (two deletes, or one and a hand): Docker answers
    409 "removal already in progress" to the late ones; each waits for the removal instead.
    Podman answers "no such container", which the drain counts as gone."""
    workload = name("rm3")
    await deployer.create(plan(workload, [graceful("app", 0, markers)]))
    driver = deployer.driver
    listed = await driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]
    [app] = [r for r in snapshot(workload, listed).containers if r.name == "app"]
    outcomes: list[str] = []

    async def remove() -> None:
        try:
            await driver.ops.remove(app)  # type: ignore[attr-defined]
        except WorkloadNotFound:
            outcomes.append("not found")
        else:
            outcomes.append("removed")

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(remove)
    assert len(outcomes) == 3 and "removed" in outcomes
    status = await deployer.get(workload)
    assert "app" not in {c.name for c in status.containers}
