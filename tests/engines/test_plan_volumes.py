"""A plan's named volume is its data (issue 24 item 1): no path but the delete of the plan's last
instance removes it. The model cache a plan mounts must survive ``create`` of a changed plan,
the repair of a dead workload, a recreate whose new instance fails, and the roll-back of one.

Each test writes a file into the volume and reads it back afterwards, on Docker and Podman.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from asyncdeploy import Container, Deployer, Mount, WorkloadNotFound
from tests.engines.helpers import plan
from tests.engines.test_create_state import container_id
from tests.engines.test_replace import server
from tests.polling import until

pytestmark = pytest.mark.anyio


def cached(app: str, version: str, *, ready: bool = True) -> list[Container]:
    """A server mounting the plan's cache volume, ready at once (or never)."""
    cache = Mount(source=f"{app}-cache", target="/cache", type="volume")
    return [attrs.evolve(server(version, ready_after=0 if ready else -1), mounts=[cache])]


async def write_mark(deployer: Deployer, app: str) -> None:
    done = await deployer.exec(app, ["sh", "-c", "echo kept > /cache/mark"])
    assert done.exit_code == 0, done.output


async def read_mark(deployer: Deployer, app: str) -> str:
    return (await deployer.exec(app, ["cat", "/cache/mark"])).output.strip()


async def volume_exists(deployer: Deployer, volume: str) -> bool:
    session = deployer.driver.session  # type: ignore[attr-defined]
    try:
        with session.errors("inspect volume"):
            await session.show_volume(volume)
    except WorkloadNotFound:
        return False
    return True


async def test_create_of_a_changed_plan_and_the_repair_of_a_dead_one_keep_the_volume(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    app = name("volcreate")
    await deployer.create(plan(app, cached(app, "v1"), termination_grace_period_seconds=2))
    await deployer.wait_ready(app, timeout=20)
    await write_mark(deployer, app)

    changed = plan(app, cached(app, "v2"), termination_grace_period_seconds=2)
    assert (await deployer.create(changed)).action == "replaced"
    await deployer.wait_ready(app, timeout=20)
    assert await read_mark(deployer, app) == "kept", "create of a changed plan kept the data"

    # every run container killed: the same plan is dead, and a create repairs it
    current = (await deployer.get(app)).name
    containers = deployer.driver.session.client.containers  # type: ignore[attr-defined]
    await containers.container(await container_id(deployer, current, "server")).kill()
    await until(lambda: _exited(deployer, app), timeout=20, interval=0.2)
    assert (await deployer.create(changed)).action == "replaced"
    await deployer.wait_ready(app, timeout=20)
    assert await read_mark(deployer, app) == "kept", "the repair kept the data"

    await deployer.delete(app)
    assert not await volume_exists(deployer, f"{app}-cache"), "the last instance's delete"


async def _exited(deployer: Deployer, app: str) -> bool:
    status = await deployer.get(app)
    return all(c.state == "exited" for c in status.containers if c.role == "run")
