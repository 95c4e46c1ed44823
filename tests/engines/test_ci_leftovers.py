"""ci/remove-leftovers.sh (what ci/setup.sh runs) removes only labelled containers older than any
live run: on a shared engine another run's young containers survive it. Scoped here to a label
of this test's own, so it can touch nothing else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncdeploy import Container, Deployer, WorkloadPlan
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio
SCRIPT = Path(__file__).parents[2] / "ci" / "remove-leftovers.sh"


async def leftovers(engine: str, label: str, minutes: int, *, dry: bool) -> list[str]:
    env = {
        **os.environ,
        "ENGINES": engine,
        "LABELS": label,
        "LEFTOVER_MINUTES": str(minutes),
        "DRY_RUN": "1" if dry else "0",
    }
    done = await anyio.run_process(["bash", str(SCRIPT)], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


async def test_only_containers_older_than_a_run_are_removed(deployer: Deployer, name: Any) -> None:
    engine = deployer.driver_name
    label = f"t{RUN_ID}-leftover-{engine}"
    workload = name("leftover")
    await deployer.create(
        WorkloadPlan(
            name=workload,
            pause_image=PAUSE,
            labels={RUN_LABEL: RUN_ID, label: "1"},
            containers=[Container(name="app", image=BUSYBOX, command=["sleep", "600"])],
        )
    )
    assert await leftovers(engine, label, 120, dry=False) == []  # young: another run's, kept
    assert (await deployer.get(workload)).state == "running"
    listed = await leftovers(engine, label, 0, dry=True)
    assert [line.split()[2].rsplit("_", 1)[1] for line in listed] == ["app", "pause"], listed
    assert (await deployer.get(workload)).state == "running"  # a dry run removes nothing
    await leftovers(engine, label, 0, dry=False)
    assert await deployer.list({label: "1"}) == []
