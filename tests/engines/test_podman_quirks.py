"""Podman's departures from Docker, each checked on the real engine, and how the driver reads them."""

from __future__ import annotations

import pytest

from asyncdeploy import Deployer, WorkloadConflict, open_deployer
from asyncdeploy.drivers.engine._ops import ContainerRef
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio


async def test_engine_state_answers(deployer: Deployer) -> None:
    """Killing an exited container (Docker 409, Podman 500) reads as "not running", and a taken
    name (Docker 409, Podman 500) reads as a conflict; a stop of a stopped container is a 304."""
    driver = deployer.driver
    client = driver.session.client  # type: ignore[attr-defined]
    name = f"t{RUN_ID}-quirk-{driver.name}"
    config = {
        "Image": BUSYBOX,
        "Cmd": ["true"],
        "Labels": {RUN_LABEL: RUN_ID},
        "HostConfig": {"NetworkMode": "none"},
    }
    container = await client.containers.create(config, name=name)
    try:
        await container.start()
        await container.wait()
        ref = ContainerRef(id=container.id, name=name, role="run", running=False)
        assert await driver.ops.signal(ref, "SIGTERM") is False  # type: ignore[attr-defined]
        with pytest.raises(WorkloadConflict), driver.session.errors("create"):  # type: ignore[attr-defined]
            await client.containers.create(config, name=name)
        async with client._query(f"containers/{container.id}/stop", method="POST") as response:
            assert response.status == 304
    finally:
        await container.delete(force=True)


async def test_pause_cannot_go_first_on_podman(deployer: Deployer) -> None:
    """Podman refuses to remove a namespace holder while others use it; Docker kills them."""
    driver = deployer.driver
    client = driver.session.client  # type: ignore[attr-defined]
    labels = {RUN_LABEL: RUN_ID}
    pause = await client.containers.create(
        {
            "Image": PAUSE,
            "Labels": labels,
            "HostConfig": {"IpcMode": "shareable", "NetworkMode": "none"},
        },
        name=f"t{RUN_ID}-holder-{driver.name}",
    )
    await pause.start()
    joined_mode = f"container:{pause.id}"
    joined = await client.containers.create(
        {
            "Image": BUSYBOX,
            "Cmd": ["sleep", "60"],
            "Labels": labels,
            "HostConfig": {
                "NetworkMode": joined_mode,
                "IpcMode": joined_mode,
                "PidMode": joined_mode,
            },
        },
        name=f"t{RUN_ID}-joined-{driver.name}",
    )
    await joined.start()
    try:
        if driver.name == "podman":
            errors = driver.session.errors  # type: ignore[attr-defined]
            with pytest.raises(WorkloadConflict, match="dependent"), errors("remove pause"):
                await pause.delete(force=True)
            assert (await joined.show())["State"]["Running"] is True
        else:
            await pause.delete(force=True)
            state = (await joined.show())["State"]
            assert state["Running"] is False and state["ExitCode"] == 137
    finally:
        await joined.delete(force=True)
        if driver.name == "podman":
            await pause.delete(force=True)


async def test_docker_driver_on_podmans_socket_becomes_podman(deployer: Deployer) -> None:
    """DOCKER_HOST often points at Podman's socket: the quirks must follow the engine, not the name."""
    url = deployer.driver.url  # type: ignore[attr-defined]
    async with open_deployer("docker", url=url) as opened:
        assert opened.driver_name == deployer.driver_name
