"""Where a plan's ports are published (issue 31 item 6), read off the engine's own bindings.

A port without ``host_port`` is published on a free port the engine picks, on 127.0.0.1 only:
never on every interface unless the plan asks for a host port (Docker's default for an empty
``HostIp`` is ``0.0.0.0`` and ``::``). ``host_ip`` still says where; a fixed ``host_port``
without it binds every address, as ``docker run -p 8000:8000``. ``list``'s PORTS column and
``get -o json`` say the same as the engine's inspect.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.labels import LABEL_ROLE
from asyncdeploy.verify._ports import free_port
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import plan_file

pytestmark = pytest.mark.anyio

EVERY_ADDRESS = {"", "0.0.0.0", "::"}


def bindings(inspected: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """The pause container's port bindings as the engine applied them (``NetworkSettings``)."""
    [pause] = [
        c
        for c in inspected["containers"].values()
        if (c["Config"]["Labels"] or {}).get(LABEL_ROLE) == "pause"
    ]
    return {k: list(v or []) for k, v in (pause["NetworkSettings"]["Ports"] or {}).items()}


async def test_a_port_without_host_port_is_published_on_loopback_only(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    workload = name("ports")
    fixed = free_port()
    server = {
        "name": "server",
        "image": BUSYBOX,
        "command": ["sleep", "300"],
        "ports": [
            {"container_port": 8080},  # nothing asked: loopback, an engine-picked port
            {"container_port": 8081, "host_port": fixed, "host_ip": "127.0.0.1"},
            {"container_port": 8082, "protocol": "udp"},
        ],
    }
    path = plan_file(tmp_path, workload, [server], termination_grace_period_seconds=1)
    await deployer.create(WorkloadPlan.from_file(path))

    bound = bindings(await deployer.inspect(workload))
    for key in ("8080/tcp", "8082/udp"):
        assert bound[key], bound  # published: a balancer on this host can reach it
        for binding in bound[key]:
            assert binding["HostIp"] == "127.0.0.1", bound
            assert int(binding["HostPort"]) > 0, bound
    assert [(b["HostIp"], b["HostPort"]) for b in bound["8081/tcp"]] == [("127.0.0.1", str(fixed))]
    assert not any(b["HostIp"] in EVERY_ADDRESS for v in bound.values() for b in v), bound

    # what asyncdeploy shows says the same: get -o json and list's PORTS column
    picked = next(b["HostPort"] for b in bound["8080/tcp"])
    shown = await invoke_in_thread("--driver", deployer.driver_name, "get", workload, "-o", "json")
    assert shown.exit_code == 0, shown.stderr
    ports = {p["container_port"]: p for p in json.loads(shown.stdout)["ports"]}
    assert ports[8080]["host_ip"] == "127.0.0.1", ports
    assert ports[8080]["host_port"] == int(picked), ports
    listed = await invoke_in_thread(
        "--driver", deployer.driver_name, "list", "-l", f"asyncdeploy.io/workload={workload}"
    )
    assert listed.exit_code == 0, listed.stderr
    assert f"127.0.0.1:{picked}->8080/tcp" in listed.stdout, listed.stdout


async def test_a_fixed_host_port_binds_every_address_and_host_ip_is_kept(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    """What the plan asks for is what it gets: a fixed host port (as ``docker run -p``) on every
    address, and an engine-picked port on the ``host_ip`` the plan names."""
    workload = name("portsfix")
    fixed = free_port()
    server = {
        "name": "server",
        "image": BUSYBOX,
        "command": ["sleep", "300"],
        "ports": [
            {"container_port": 8080, "host_port": fixed},
            {"container_port": 8081, "host_ip": "0.0.0.0"},
        ],
    }
    path = plan_file(tmp_path, workload, [server], termination_grace_period_seconds=1)
    await deployer.create(WorkloadPlan.from_file(path))

    bound = bindings(await deployer.inspect(workload))
    assert {b["HostPort"] for b in bound["8080/tcp"]} == {str(fixed)}, bound
    assert any(b["HostIp"] in EVERY_ADDRESS for b in bound["8080/tcp"]), bound
    assert [b["HostIp"] for b in bound["8081/tcp"]] == ["0.0.0.0"], bound
