"""A create killed after it made its plan's named volume and before its pause container leaves a
volume and no container (issue 17 item 7): ``list`` shows it half-made, ``reconcile`` and
``delete`` remove it. The window between those two engine calls cannot be hit on demand, so
the test makes the volume exactly as the create does (its labels: the plan's, the plan it
belongs to, its maker) with a maker that is dead, or alive for a create still at work."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiodocker
import attrs
import pytest

from asyncdeploy import Deployer, WorkloadNotFound
from asyncdeploy._owner import Owner
from asyncdeploy.labels import LABEL_ATTEMPT_OWNER, LABEL_VOLUME_PLAN
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio

DEAD = attrs.evolve(Owner.this_process(), pid=999_999_999)  # above any pid_max: it runs nowhere


@pytest.fixture
def client(deployer: Deployer) -> aiodocker.Docker:
    return deployer.driver.session.client  # type: ignore[attr-defined,no-any-return]


async def leave_volume(client: aiodocker.Docker, plan: str, maker: Owner) -> str:
    """The volume a create of ``plan`` makes first, as ``_create.py`` labels it."""
    volume = f"{plan}-data"
    labels = {
        RUN_LABEL: RUN_ID,  # the plan's own labels
        LABEL_VOLUME_PLAN: plan,
        LABEL_ATTEMPT_OWNER: json.dumps(maker.to_data(), sort_keys=True),
    }
    await client.volumes.create({"Name": volume, "Labels": labels})  # type: ignore[no-untyped-call]
    return volume


async def volume_exists(client: aiodocker.Docker, volume: str) -> bool:
    listed: Any = await client.volumes.list(filters={"name": [volume]})  # type: ignore[no-untyped-call]
    return any(v["Name"] == volume for v in listed.get("Volumes") or [])


async def listed(driver: str) -> dict[str, dict[str, Any]]:
    result = await invoke_in_thread(
        "--driver", driver, "list", "-l", f"{RUN_LABEL}={RUN_ID}", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    return {w["name"]: w for w in json.loads(result.stdout)}


async def test_a_volume_left_by_a_killed_create_is_listed_and_reconciled_away(
    deployer: Deployer, name: Callable[[str], str], client: aiodocker.Docker
) -> None:
    plan = name("leftvol")
    volume = await leave_volume(client, plan, DEAD)
    try:
        shown = (await listed(deployer.driver_name)).get(plan)
        assert shown is not None, "list does not show the volume the killed create left"
        assert str(shown["unfinished"]).startswith(f"half-made: volume {volume}"), shown
        assert shown["containers"] == []
        dry = await invoke_in_thread(
            "--driver",
            deployer.driver_name,
            "reconcile",
            "--dry-run",
            "-l",
            f"{RUN_LABEL}={RUN_ID}",
        )
        assert dry.exit_code == 0, dry.output
        assert f"would finish {plan}: half-made: volume {volume}" in dry.stderr, dry.stderr
        assert "\n  remove its named volumes" in dry.stderr, "the dry run lists the step"
        assert await volume_exists(client, volume), "a dry run touches nothing"
        result = await invoke_in_thread(
            "--driver", deployer.driver_name, "reconcile", "-l", f"{RUN_LABEL}={RUN_ID}"
        )
        assert result.exit_code == 0, result.output
        assert not await volume_exists(client, volume)
        assert plan not in await listed(deployer.driver_name)
    finally:
        if await volume_exists(client, volume):
            await (await client.volumes.get(volume)).delete()  # type: ignore[no-untyped-call]


async def test_delete_removes_a_volume_left_by_a_killed_create(
    deployer: Deployer, name: Callable[[str], str], client: aiodocker.Docker
) -> None:
    plan = name("delvol")
    volume = await leave_volume(client, plan, DEAD)
    try:
        summary = await deployer.delete(plan)
        assert summary.ok and summary.containers == ()
        assert not await volume_exists(client, volume)
        with pytest.raises(WorkloadNotFound):
            await deployer.delete(plan)  # nothing left: a second delete finds nothing
    finally:
        if await volume_exists(client, volume):
            await (await client.volumes.get(volume)).delete()  # type: ignore[no-untyped-call]


async def test_a_volume_whose_create_is_at_work_is_left_alone(
    deployer: Deployer, name: Callable[[str], str], client: aiodocker.Docker
) -> None:
    plan = name("busyvol")
    volume = await leave_volume(client, plan, Owner.this_process())
    try:
        assert plan not in await listed(deployer.driver_name)
        result = await invoke_in_thread(
            "--driver", deployer.driver_name, "reconcile", "-l", f"{RUN_LABEL}={RUN_ID}"
        )
        assert result.exit_code == 0, result.output
        assert await volume_exists(client, volume), "reconcile removed a live create's volume"
    finally:
        await (await client.volumes.get(volume)).delete()  # type: ignore[no-untyped-call]
