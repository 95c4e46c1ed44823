"""Real signals to a real ``create`` of a changed plan (issue 16 item 1(a), issue 24 item 5).

A changed plan replaces the workload as ``replace`` does (surge here: the new instance ready
first), so a signal follows the replace's policy: before the old workload's drain, the first
stops the create (the new instance is removed, the old one keeps serving, exit 130); during that
drain the first lets it finish (exit 0: the new one serves) and a second kills the old one's
survivors (exit 130), never the new one.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_INSTANCE_OF
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import graceful, plan, plan_file, read_markers
from tests.engines.test_replace_signals import never_ready
from tests.polling import until

pytestmark = pytest.mark.anyio

EXIT_SIGINT = 130


def changed_plan(tmp_path: Path, workload: str, markers: Path, drain: float, grace: int) -> Path:
    """The old workload's plan with one env value changed: a create replaces it."""
    container: dict[str, Any] = {
        "name": "drainer",
        "image": BUSYBOX,
        "command": ["graceful", "drainer", str(drain)],
        "env": {"MARKER_FILE": "/out/markers", "VERSION": "2"},
        "mounts": [{"source": str(markers), "target": "/out"}],
    }
    return plan_file(tmp_path, workload, [container], termination_grace_period_seconds=grace)


async def serving(
    deployer: Deployer, workload: str, markers: Path, drain: float, grace: int
) -> None:
    await deployer.create(
        plan(
            workload, [graceful("drainer", drain, markers)], termination_grace_period_seconds=grace
        )
    )
    await deployer.wait_ready(workload, timeout=30)


def drainer_outcome(lines: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    [finished] = [
        line
        for line in lines
        if line.get("event") == "DrainFinished" and line["workload"] == workload
    ]
    [drainer] = [c for c in finished["containers"] if c["name"] == "drainer"]
    return drainer


async def instances(deployer: Deployer, app: str) -> set[str]:
    return {w.name for w in await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID})}


async def test_a_sigint_before_the_old_drain_stops_the_create_and_leaves_the_old_serving(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("crsig0")
    await serving(deployer, workload, markers, drain=1, grace=10)
    before = await deployer.get(workload)
    path = plan_file(tmp_path, workload, [never_ready(markers)], termination_grace_period_seconds=5)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    await until(lambda: ("next", "start") in read_markers(markers), timeout=30)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert code == EXIT_SIGINT, stderr
    assert "the new instance was removed; the old one was not touched" in stderr
    assert "Traceback" not in stderr
    assert await instances(deployer, workload) == set()
    assert (await deployer.get(workload)).containers == before.containers, "never signalled"


async def test_one_sigint_lets_the_old_workloads_drain_finish_and_the_new_serves(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("crsig1")
    await serving(deployer, workload, markers, drain=3, grace=15)
    path = changed_plan(tmp_path, workload, markers, drain=3, grace=15)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")  # the old workload's drain has begun
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert code == 0, stderr
    assert "goes on until its deadline" in stderr
    assert "Traceback" not in stderr
    assert not any(line.get("event") == "ContainerForceKilled" for line in cli.lines)
    drainer = drainer_outcome(cli.lines, workload)
    assert drainer["outcome"] == "exited" and drainer["exit_code"] == 0
    assert drainer["seconds"] >= 2.5  # its whole 3 s drain, not cut at the signal
    assert cli.lines[-1]["action"] == "replaced"
    assert (await deployer.get(workload)).name in await instances(deployer, workload)


async def test_a_second_sigint_kills_the_old_workload_and_keeps_the_new(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("crsig2")
    await serving(deployer, workload, markers, drain=25, grace=30)
    path = changed_plan(tmp_path, workload, markers, drain=25, grace=30)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    await anyio.sleep(0.3)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    # killed at once, not at the 30 s deadline: the drain says why it killed
    kills = [line for line in cli.lines if line.get("event") == "ContainerForceKilled"]
    assert kills and {k["reason"] for k in kills} == {"cancelled"}, kills
    assert code == EXIT_SIGINT, stderr
    assert "killing the remaining containers now" in stderr
    assert "Traceback" not in stderr
    assert drainer_outcome(cli.lines, workload)["outcome"] == "killed"
    assert (await deployer.get(workload)).name in await instances(deployer, workload)
