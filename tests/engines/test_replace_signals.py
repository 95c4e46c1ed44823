"""Real signals to a real ``replace`` CLI process (issue 16 item 1(b)).

Before the old instance's drain begins, the first SIGINT/SIGTERM stops the replace: the new
instance is removed and the old one keeps serving (exit 130/143). During the old instance's
drain, the first lets it finish (exit 0, as delete) and the second kills what remains.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_INSTANCE_OF
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import graceful, plan, plan_file, read_markers
from tests.polling import until

pytestmark = pytest.mark.anyio

EXIT_SIGINT, EXIT_SIGTERM = 130, 143


def never_ready(markers: Path) -> dict[str, object]:
    """A run container (as a plan file writes it) that drains 1 s and never turns ready."""
    return {
        "name": "next",
        "image": BUSYBOX,
        "command": ["graceful", "next", "1"],
        "env": {"MARKER_FILE": "/out/markers"},
        "mounts": [{"source": str(markers), "target": "/out"}],
        "checks": {"readiness": {"exec": ["test", "-f", "/never"], "period_seconds": 1}},
    }


def ready_at_once(markers: Path, drain: float = 1) -> dict[str, object]:
    return {
        "name": "next",
        "image": BUSYBOX,
        "command": ["graceful", "next", str(drain)],
        "env": {"MARKER_FILE": "/out/markers"},
        "mounts": [{"source": str(markers), "target": "/out"}],
    }


async def instances(deployer: Deployer, app: str) -> set[str]:
    return {w.name for w in await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID})}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_before_the_old_drain_stops_the_replace_and_leaves_the_old_serving(
    deployer: Deployer,
    name: Callable[[str], str],
    markers: Path,
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    app = name("rsig")
    await deployer.create(
        plan(app, [graceful("old", 3, markers)], termination_grace_period_seconds=10)
    )
    before = await deployer.wait_ready(app, timeout=30)
    path = plan_file(tmp_path, app, [never_ready(markers)], termination_grace_period_seconds=10)
    cli = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    # the new instance was started and is waited for
    await until(lambda: ("next", "start") in read_markers(markers), timeout=30)
    await anyio.sleep(0.5)
    cli.send(signum)
    code, stderr = await cli.finish()

    assert code == 128 + signum, stderr
    assert "the new instance is removed and the old one keeps serving" in stderr
    assert "Traceback" not in stderr
    assert await instances(deployer, app) == set(), "the new instance was removed"
    assert (await deployer.get(app)).containers == before.containers, "the old one untouched"
    marks = read_markers(markers)
    assert ("old", "got-TERM") not in marks
    assert ("next", "got-TERM") in marks, "the new instance was drained, not killed"
    rolled = [line for line in cli.lines if line.get("event") == "ReplaceRolledBack"]
    assert rolled and "interrupted" in rolled[0]["reason"]


async def test_one_sigint_during_the_old_drain_lets_it_finish(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app = name("rsig1")
    await deployer.create(
        plan(app, [graceful("old", 3, markers)], termination_grace_period_seconds=20)
    )
    await deployer.wait_ready(app, timeout=30)
    path = plan_file(tmp_path, app, [ready_at_once(markers)], termination_grace_period_seconds=20)
    cli = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")  # the old instance's drain has begun
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert code == 0, stderr  # one signal does not change how the drain ends
    assert "goes on until its deadline" in stderr
    assert "Traceback" not in stderr
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished" and last["workload"] == app
    assert [c["outcome"] for c in last["containers"] if c["role"] == "run"] == ["exited"]
    assert ("old", "drained-ok") in read_markers(markers)
    assert len(await instances(deployer, app)) == 1, "the new instance serves"


async def test_two_sigints_during_the_old_drain_kill_it_and_keep_the_new(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app = name("rsig2")
    await deployer.create(
        plan(app, [graceful("old", 25, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(app, timeout=30)
    path = plan_file(tmp_path, app, [ready_at_once(markers)], termination_grace_period_seconds=30)
    cli = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    await cli.said(b"again")  # the first was taken ("press Ctrl-C again to kill ...")
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    # killed at once, not at the 30 s deadline: the drain says why it killed
    kills = [line for line in cli.lines if line.get("event") == "ContainerForceKilled"]
    assert kills and {k["reason"] for k in kills} == {"cancelled"}, kills
    assert ("old", "drained-ok") not in read_markers(markers)
    assert code == EXIT_SIGINT, stderr
    assert "killing the remaining containers now" in stderr
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished" and last["workload"] == app
    assert {c["outcome"] for c in last["containers"]} == {"killed"}
    assert len(await instances(deployer, app)) == 1, "the new instance serves"


async def test_a_second_signal_kills_the_new_instance_being_rolled_back(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app = name("rsigkill")
    await deployer.create(
        plan(app, [graceful("old", 1, markers)], termination_grace_period_seconds=30)
    )
    before = await deployer.wait_ready(app, timeout=30)
    slow = {**never_ready(markers), "command": ["graceful", "next", "25"]}
    path = plan_file(tmp_path, app, [slow], termination_grace_period_seconds=30)
    cli = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    await until(lambda: ("next", "start") in read_markers(markers), timeout=30)
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    await until(lambda: ("next", "got-TERM") in read_markers(markers), timeout=30)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    # killed at once, not after the new instance's 25 s drain nor at its 30 s deadline
    kills = [line for line in cli.lines if line.get("event") == "ContainerForceKilled"]
    assert kills and {k["reason"] for k in kills} == {"cancelled"}, kills
    assert ("next", "drained-ok") not in read_markers(markers)
    assert code == EXIT_SIGINT, stderr
    assert "killing the new instance's remaining containers now" in stderr
    finished = [line for line in cli.lines if line.get("event") == "DrainFinished"]
    assert [c["outcome"] for c in finished[-1]["containers"] if c["role"] == "run"] == ["killed"]
    assert await instances(deployer, app) == set()
    assert (await deployer.get(app)).containers == before.containers, "the old one untouched"
