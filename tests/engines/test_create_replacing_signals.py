"""Real signals to a real ``create`` that replaces a workload (issue 16 item 1(a)).

A changed plan drains the old workload before it creates the new one. A Ctrl-C during that
drain must not kill the old workload: the drain runs to its end, then the create stops (nothing
new is made); only a second signal kills, as for ``delete``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncdeploy import Deployer, WorkloadNotFound
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import graceful, plan, plan_file, read_markers

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


def drainer_outcome(lines: list[dict[str, Any]]) -> dict[str, Any]:
    [finished] = [line for line in lines if line.get("event") == "DrainFinished"]
    [drainer] = [c for c in finished["containers"] if c["name"] == "drainer"]
    return drainer


async def test_one_sigint_lets_the_old_workloads_drain_finish_and_creates_nothing(
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

    assert code == EXIT_SIGINT, stderr
    assert "goes on until its deadline" in stderr
    assert "the replaced workload was drained and removed; nothing new was created" in stderr
    assert "Traceback" not in stderr
    assert not any(line["event"] == "ContainerForceKilled" for line in cli.lines)
    drainer = drainer_outcome(cli.lines)
    assert drainer["outcome"] == "exited" and drainer["exit_code"] == 0
    assert drainer["seconds"] >= 2.5  # its whole 3 s drain, not cut at the signal
    assert ("drainer", "drained-ok") in read_markers(markers)
    with pytest.raises(WorkloadNotFound):  # nothing new was created after the Ctrl-C
        await deployer.get(workload)


async def test_a_second_sigint_kills_the_old_workload_and_creates_nothing(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("crsig2")
    await serving(deployer, workload, markers, drain=25, grace=30)
    path = changed_plan(tmp_path, workload, markers, drain=25, grace=30)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(0.5)
    started = anyio.current_time()
    cli.send(signal.SIGINT)
    await anyio.sleep(0.3)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert anyio.current_time() - started < 20  # not the 30 s deadline
    assert code == EXIT_SIGINT, stderr
    assert "killing the replaced workload's remaining containers now" in stderr
    assert "remaining containers were killed and removed; nothing new was created" in stderr
    assert "Traceback" not in stderr
    assert cli.lines[-1]["event"] == "DrainFinished"
    assert drainer_outcome(cli.lines)["outcome"] == "killed"
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)


async def test_without_a_signal_the_create_replaces(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """The control: the same create, uninterrupted, drains the old one and creates the new."""
    workload = name("crsig0")
    await serving(deployer, workload, markers, drain=1, grace=15)
    path = changed_plan(tmp_path, workload, markers, drain=1, grace=15)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    code, stderr = await cli.finish()

    assert code == 0, stderr
    assert cli.lines[-1]["action"] == "replaced"
    assert drainer_outcome(cli.lines)["outcome"] == "exited"
    status = await deployer.get(workload)
    assert {c.name for c in status.containers} >= {"drainer"}
