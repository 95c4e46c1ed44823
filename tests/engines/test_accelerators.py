"""Accelerators on the real engines, without a GPU.

Podman: a CDI specification for a made-up vendor device (``/dev/null`` as
``/dev/asyncdeploy-dev0`` and an environment variable) is injected and visible inside the
container. Docker 20.10: the engine's own refusal of the ``nvidia`` driver becomes one clear
CreateError, and CDI names are refused before anything is created. Nothing is left behind.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from asyncdeploy import (
    Checks,
    Container,
    CreateError,
    Deployer,
    Mount,
    Probe,
    Resources,
)
from asyncdeploy.labels import LABEL_WORKLOAD
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL, open_engine
from tests.engines.helpers import plan

pytestmark = pytest.mark.anyio

CDI_DIR = Path("/etc/cdi")
CDI_KIND = "asyncdeploy.test/device"
# Podman 4.3 vendors the CDI library 0.5: specification version 0.5.0 is the newest it reads.
CDI_SPEC = """\
cdiVersion: "0.5.0"
kind: asyncdeploy.test/device
devices:
  - name: {device}
    containerEdits:
      env: ["ASYNCDEPLOY_TEST_DEVICE={device}"]
      deviceNodes:
        - path: /dev/asyncdeploy-{device}
          hostPath: /dev/null
"""


@pytest.fixture
async def podman() -> AsyncIterator[Deployer]:
    async for opened in open_engine("podman"):
        yield opened


@pytest.fixture
async def docker() -> AsyncIterator[Deployer]:
    async for opened in open_engine("docker"):
        yield opened


@pytest.fixture
def cdi_device() -> Iterator[str]:
    """A made-up vendor device in a CDI specification under /etc/cdi, removed afterwards.

    The device name is unique to the test, so concurrent runs never define it twice."""
    device = f"dev{RUN_ID}{secrets.token_hex(2)}"
    path = CDI_DIR / f"asyncdeploy-test-{device}.yaml"
    try:
        CDI_DIR.mkdir(exist_ok=True)
        path.write_text(CDI_SPEC.format(device=device))
    except PermissionError:
        pytest.skip("writing a CDI specification under /etc/cdi needs root")
    try:
        yield device
    finally:
        path.unlink(missing_ok=True)


def sleeper(**resources: object) -> Container:
    return Container(
        name="server",
        image=BUSYBOX,
        command=["sleep", "600"],
        stop_signal="SIGKILL",
        resources=Resources(**resources),  # type: ignore[arg-type]
    )


async def assert_nothing_left(deployer: Deployer, workload: str) -> None:
    assert await deployer.list({LABEL_WORKLOAD: workload}) == []


@pytest.mark.podman
async def test_podman_injects_a_cdi_device(
    podman: Deployer, name: Callable[[str], str], cdi_device: str, tmp_path: Path
) -> None:
    """The CDI device's node and environment reach the container, created through libpod
    with everything else of the plan intact (limits, mounts, labels, joined namespaces)."""
    workload = name("cdi")
    server = Container(
        name="server",
        image=BUSYBOX,
        command=["sleep", "600"],
        env={"PLAN_ENV": "kept"},
        mounts=[Mount(source=str(tmp_path), target="/out")],
        resources=Resources(memory="64Mi", devices=[f"{CDI_KIND}={cdi_device}"]),
        stop_signal="SIGINT",
        checks=Checks(liveness=Probe(exec=["true"], period_seconds=30)),
    )
    # Its own PID namespace, so that PID 1 is the container's process: CDI's environment
    # edits reach the container process, not later exec sessions.
    await podman.create(plan(workload, [server], pid_shared=False))
    await podman.wait_ready(workload, timeout=30)

    seen = await podman.exec(
        workload,
        [
            "sh",
            "-c",
            "tr '\\0' '\\n' </proc/1/environ; test -c /dev/asyncdeploy-$0 && echo node",
            cdi_device,
        ],
    )
    assert seen.exit_code == 0, seen.output
    lines = seen.output.split()
    assert f"ASYNCDEPLOY_TEST_DEVICE={cdi_device}" in lines
    assert "PLAN_ENV=kept" in lines
    assert "node" in lines

    details = (await podman.inspect(workload))["containers"]
    pause_id = details["pause"]["Id"]
    host = details["server"]["HostConfig"]
    assert host["Memory"] == 64 * 2**20
    assert host["NetworkMode"] == f"container:{pause_id}"
    assert details["server"]["Config"]["Labels"][RUN_LABEL] == RUN_ID
    assert [m["Destination"] for m in details["server"]["Mounts"]] == ["/out"]
    config = details["server"]["Config"]
    assert config["StopSignal"] in ("SIGINT", "2")  # Podman 4.3 reports the number
    assert config["Healthcheck"]["Test"] == ["CMD", "true"]
    await podman.delete(workload, grace_period_seconds=0)
    await assert_nothing_left(podman, workload)


@pytest.mark.podman
async def test_podman_unknown_cdi_device_is_one_clear_error(
    podman: Deployer, name: Callable[[str], str], cdi_device: str
) -> None:
    """A CDI device no specification defines: Podman's refusal (at start) becomes a
    CreateError naming the container and the device, and nothing is left."""
    workload = name("nocdi")
    missing = f"{CDI_KIND}={cdi_device}-absent"
    with pytest.raises(CreateError) as caught:
        await podman.create(plan(workload, [sleeper(devices=[missing])]))
    message = str(caught.value)
    assert f"{workload}_server" in message
    assert missing in message
    assert "unresolvable CDI devices" in message
    await assert_nothing_left(podman, workload)


@pytest.mark.podman
async def test_podman_refuses_a_gpu_count(podman: Deployer, name: Callable[[str], str]) -> None:
    """Podman cannot count devices: refused before anything exists, asking for pinned ones."""
    workload = name("podcount")
    with pytest.raises(CreateError, match=r"Podman cannot count devices.*nvidia.com/gpu=0"):
        await podman.create(plan(workload, [sleeper(extended={"nvidia.com/gpu": 1})]))
    await assert_nothing_left(podman, workload)


@pytest.mark.docker
async def test_docker_without_the_nvidia_driver_is_one_clear_error(
    docker: Deployer, name: Callable[[str], str]
) -> None:
    """Docker accepts the NVIDIA device request at create and refuses it at start ("could not
    select device driver"): one CreateError naming container and resource, nothing left."""
    workload = name("nogpu")
    with pytest.raises(CreateError) as caught:
        await docker.create(plan(workload, [sleeper(extended={"nvidia.com/gpu": 1})]))
    message = str(caught.value)
    assert f"container {workload}_server" in message
    assert "nvidia.com/gpu: 1" in message
    assert 'could not select device driver "nvidia"' in message
    await assert_nothing_left(docker, workload)


@pytest.mark.docker
async def test_docker_before_25_refuses_cdi_names(
    docker: Deployer, name: Callable[[str], str]
) -> None:
    """Docker 20.10 has no CDI: refused with the engine's API version, before any create."""
    workload = name("dockcdi")
    with pytest.raises(
        CreateError, match=r"CDI device asyncdeploy.test/device=dev0.*API 1\.4[0-3]"
    ):
        await docker.create(plan(workload, [sleeper(devices=[f"{CDI_KIND}=dev0"])]))
    await assert_nothing_left(docker, workload)
