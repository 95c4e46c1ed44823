"""What ``create`` does with a workload of the same plan that is not as the plan asks (issue 16
items 14 and 16), through the real CLI on real engines.

- ``create --wait`` on an unchanged workload whose sidecar exited fails, and leaves the
  workload as it was: a wait never deletes what its create did not make, and never kills.
- ``create`` of the same plan over a dead workload (every run container exited, the pause
  paused by a delete that died) is not ``unchanged``: it is replaced, and the new one serves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy import Deployer, WorkloadPlan
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import plan_file, read_markers, started
from tests.polling import until

pytestmark = pytest.mark.anyio


def server(markers: Path) -> dict[str, Any]:
    return {
        "name": "server",
        "image": BUSYBOX,
        "command": ["graceful", "server", "1"],
        "env": {"MARKER_FILE": "/out/markers"},
        "mounts": [{"source": str(markers), "target": "/out"}],
    }


async def state_of(deployer: Deployer, workload: str, container: str) -> str:
    status = await deployer.get(workload)
    return next(c.state for c in status.containers if c.name == container)


async def container_id(deployer: Deployer, workload: str, container: str) -> str:
    return str(await deployer.driver._container_id(workload, container))  # type: ignore[attr-defined]


async def test_a_failed_wait_leaves_an_unchanged_workload_serving(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("waitkeep")
    sidecar = {"name": "sidecar", "image": BUSYBOX, "command": ["sh", "-c", "sleep 1; exit 1"]}
    path = plan_file(
        tmp_path, workload, [server(markers), sidecar], termination_grace_period_seconds=10
    )
    await deployer.create(WorkloadPlan.from_file(path))
    await started(markers, "server")

    async def sidecar_exited() -> bool:
        return await state_of(deployer, workload, "sidecar") == "exited"

    await until(sidecar_exited, timeout=30, interval=0.2)
    cli = await start_cli(
        deployer.driver_name, "create", "-f", str(path), "--wait", "--timeout", "20s"
    )
    code, stderr = await cli.finish()

    assert code == 1, stderr  # the wait fails: a run container has exited
    assert "sidecar" in stderr and "exited" in stderr
    assert "left as it was" in stderr
    assert "Traceback" not in stderr
    assert await state_of(deployer, workload, "server") == "running"  # still serving
    assert ("server", "got-TERM") not in read_markers(markers)  # never signalled, never killed


async def test_create_over_a_dead_workload_of_the_same_plan_replaces_it(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """Every run container killed and the pause paused (a delete that died after claiming):
    the same plan is created anew, not reported ``unchanged``."""
    workload = name("dead")
    path = plan_file(tmp_path, workload, [server(markers)], termination_grace_period_seconds=5)
    await deployer.create(WorkloadPlan.from_file(path))
    await started(markers, "server")
    containers = deployer.driver.session.client.containers  # type: ignore[attr-defined]
    await containers.container(await container_id(deployer, workload, "server")).kill()
    await until(lambda: _is(deployer, workload, "server", "exited"), timeout=30, interval=0.2)
    await containers.container(await container_id(deployer, workload, "pause")).pause()

    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    code, stderr = await cli.finish(timeout=120)

    assert code == 0, stderr
    assert cli.lines[-1]["action"] == "replaced", cli.lines[-1]
    assert await state_of(deployer, workload, "server") == "running"
    assert await state_of(deployer, workload, "pause") == "running"


async def test_create_over_an_exited_workload_with_a_running_pause_replaces_it(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("exited")
    path = plan_file(tmp_path, workload, [server(markers)], termination_grace_period_seconds=5)
    await deployer.create(WorkloadPlan.from_file(path))
    await started(markers, "server")
    containers = deployer.driver.session.client.containers  # type: ignore[attr-defined]
    await containers.container(await container_id(deployer, workload, "server")).kill()
    await until(lambda: _is(deployer, workload, "server", "exited"), timeout=30, interval=0.2)

    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    code, stderr = await cli.finish(timeout=120)

    assert code == 0, stderr
    assert cli.lines[-1]["action"] == "replaced", cli.lines[-1]
    assert await state_of(deployer, workload, "server") == "running"


async def _is(deployer: Deployer, workload: str, container: str, state: str) -> bool:
    return await state_of(deployer, workload, container) == state
