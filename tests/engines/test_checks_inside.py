"""Checks and HTTP hooks reach the workload inside its network namespace, not from here.

Where the deployer cannot reach a container's address (rootless Podman, Docker Desktop, a
remote engine) the checks and hooks must still work. Here the address is made unreachable for
the test's duration: an iptables rule drops what this host sends to the workload's address on
the ports the checks and hooks use (one address, those ports: the machine's other workloads and
the published port the clients use are untouched). Before, these were connections from the
deployer's host: the readiness wait timed out and the gate's drain call was never answered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import yaml

from asyncdeploy import Deployer, PreStopFinished, WorkloadPlan
from asyncdeploy.drivers.engine._netcheck import tcp_open, workload_address
from asyncdeploy.labels import LABEL_PROBE_OF, LABEL_WORKLOAD
from asyncdeploy.plan import plan_to_mapping
from tests.engines.cli_process import start_cli
from tests.engines.conftest import (
    ENGINES,
    PAUSE,
    PYTHON,
    ROOTLESS_PODMAN,
    RUN_ID,
    RUN_LABEL,
    open_engine,
    rootless_url,
)
from tests.engines.test_gate import (
    STOCK_IMAGE,
    delete_under_traffic,
    free_port,
    order,
    require_images,
    stock_plan,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[*ENGINES, ROOTLESS_PODMAN])
async def deployer(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Deployer]:
    """A deployer on each real engine, rootless Podman too (the CLI runs of the test, through
    ``CONTAINER_HOST``, on the same engine)."""
    url = rootless_url(request.param)
    if url is not None:
        monkeypatch.setenv("CONTAINER_HOST", url)
    async for opened in open_engine(request.param):
        yield opened


GATE_ADMIN_PORT = 9901  # the gate's drain call (plan/gating.py's default admin port)


@contextmanager
def unreachable_from_here(address: str, ports: list[int]) -> Iterator[None]:
    """Drop what this host sends to ``address`` on ``ports`` (TCP) until the block ends."""
    iptables = shutil.which("iptables")
    if iptables is None or os.geteuid() != 0:
        pytest.skip("needs root and iptables to make the workload's address unreachable")
    rule = [
        "OUTPUT", "-d", f"{address}/32", "-p", "tcp",
        "-m", "multiport", "--dports", ",".join(map(str, ports)),
        "-m", "comment", "--comment", f"asyncdeploy-test-{RUN_ID}",
        "-j", "DROP",
    ]  # fmt: skip
    subprocess.run([iptables, "-w", "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run([iptables, "-w", "-D", *rule], check=True)


async def pause_address(deployer: Deployer, name: str) -> str:
    inspected = await deployer.inspect(name)
    address = workload_address(inspected["containers"]["pause"])
    assert address is not None and address != "127.0.0.1", address
    return address


async def workload_ids(deployer: Deployer, name: str) -> set[str]:
    """The ids of the workload's containers: the ones its helpers join."""
    listed = await deployer.driver.session.containers({LABEL_WORKLOAD: name})  # type: ignore[attr-defined]
    return {str(item["Id"]) for item in listed}


async def _helpers(deployer: Deployer, joined: set[str], *options: str) -> list[bytes]:
    """This workload's helpers (each labelled with the container it joins): another run's,
    say one a daemon failed to remove (Docker 20.10 keeps a ghost "Removal In Progress"), are
    not this test's."""
    cli = shutil.which(deployer.driver_name)
    assert cli is not None
    remote = ["--remote"] if deployer.driver_name == "podman" else []  # CONTAINER_HOST's engine
    found: list[bytes] = []
    for ident in sorted(joined):
        filtered = ["ps", "-q", *options, "--filter", f"label={LABEL_PROBE_OF}={ident}"]
        found += (await anyio.run_process([cli, *remote, *filtered])).stdout.split()
    return found


async def helpers_left(deployer: Deployer, joined: set[str]) -> list[str]:
    """This workload's helper containers still there 10 s on (each removes itself as its check
    ends; Podman's auto-remove runs in its cleanup process, a moment after the exit)."""
    listed: list[bytes] = []
    for _ in range(50):
        listed = await _helpers(deployer, joined, "-a")
        if not listed:
            break
        await anyio.sleep(0.2)
    return [ident.decode() for ident in listed]


def stock_checked(name: str, check: str, load_seconds: int = 3) -> WorkloadPlan:
    """The stock engine (no shell, wget or python3) with a readiness check: the helper path."""
    probe = {"http": {"port": 8001, "path": "/health"}} if check == "http" else {"tcp": 8001}
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "containers": [
                {
                    "name": "engine",
                    "image": STOCK_IMAGE,
                    "args": ["--port", "8001", "--load-seconds", str(load_seconds)],
                    "checks": {"readiness": {**probe, "period_seconds": 1}},
                }
            ],
        }
    )


@pytest.mark.parametrize("check", ["http", "tcp"])
async def test_a_readiness_check_works_where_the_workload_address_is_unreachable(
    deployer: Deployer, name: Callable[[str], str], check: str
) -> None:
    """Not ready while the server loads (503, or nothing listens), then ready: the check ran
    in the workload's namespace while nothing from this host reached its address."""
    require_images(deployer.driver_name)
    plan = stock_checked(name(f"in{check}"), check)
    await deployer.create(plan)
    address = await pause_address(deployer, plan.name)
    with unreachable_from_here(address, [8001]):
        assert not await tcp_open(address, 8001, 1.0), "the rule did not make it unreachable"
        if check == "http":  # /health answers 503 for 3 s: not ready yet
            with pytest.raises(Exception, match="not ready"):
                await deployer.wait_ready(plan.name, timeout=1.0)
        status = await deployer.wait_ready(plan.name, timeout=60)
        assert status.name == plan.name
    assert await helpers_left(deployer, await workload_ids(deployer, plan.name)) == []


async def test_a_gated_drain_works_where_the_workload_address_is_unreachable(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """The gate's drain call (the engine's pre_stop_http on the gate's admin port) is answered
    with this host unable to reach the admin port: nothing lost, the engine signalled after the
    drain ended well."""
    require_images(deployer.driver_name)
    port = free_port()
    plan = stock_plan(name("ingate"), port, gated=True)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    address = await pause_address(deployer, plan.name)
    with unreachable_from_here(address, [GATE_ADMIN_PORT, 8001]):
        assert not await tcp_open(address, GATE_ADMIN_PORT, 1.0), "still reachable"
        traffic, lines = await delete_under_traffic(deployer.driver_name, plan.name, port)
    assert traffic.failures == [], traffic.failures
    assert traffic.counts["failed"] == 0 and traffic.counts["ok"] >= 8, traffic.counts
    hook = next(line for line in lines if line.get("event") == "PreStopFinished")
    assert (hook["container"], hook["exit_code"]) == ("engine", 0), hook
    assert order(lines, "PreStopFinished", "engine") < order(lines, "SignalSent", "engine")


async def test_an_http_hook_without_a_gate_runs_in_a_helper(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """A pre_stop_http on a server whose image asyncdeploy did not build: sent from a helper
    that joins the workload's namespace, answered (exit 0) with the address unreachable."""
    plan = WorkloadPlan.from_mapping(
        {
            "name": name("inhook"),
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "termination_grace_period_seconds": 15,
            "containers": [
                {
                    "name": "web",
                    "image": PYTHON,
                    "command": ["python3", "-m", "http.server", "8001"],
                    "pre_stop_http": {"port": 8001, "path": "/"},
                    "checks": {"readiness": {"tcp": 8001, "period_seconds": 1}},
                }
            ],
        }
    )
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=60)
    address = await pause_address(deployer, plan.name)
    joined = await workload_ids(deployer, plan.name)  # (taken while it exists)
    events: list[Any] = []
    with unreachable_from_here(address, [8001]):
        async with deployer.terminate(plan.name) as drain:
            events.extend([event async for event in drain])
    hooks = [e for e in events if isinstance(e, PreStopFinished)]
    assert [(h.container, h.exit_code) for h in hooks] == [("web", 0)], events
    assert await helpers_left(deployer, joined) == []


async def test_a_deployer_killed_during_a_wait_leaves_no_helper_behind(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Any
) -> None:
    """SIGKILL of `create --wait` while its checks run (its helper running): the helper's input
    closes with the connection, it ends and removes itself, and the workload is then deleted as
    any other (the helper would hold its namespace: Podman refuses to remove a pause container
    others join). Not covered: a kill between the helper's create and its start (a few tens of
    ms once per wait), which leaves it created and never started."""
    require_images(deployer.driver_name)
    plan = stock_checked(name("inkill"), "http", load_seconds=120)  # not ready meanwhile
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(plan_yaml(plan))
    cli = await start_cli(deployer.driver_name, "create", "-f", str(plan_file), "--wait")
    joined: set[str] = set()
    try:
        for _ in range(300):  # its first check starts a helper (60 s at most)
            joined = await workload_ids(deployer, plan.name)
            if joined and await helpers_of(deployer, joined, "running"):
                break
            await anyio.sleep(0.2)
        else:
            pytest.fail("no helper started")
    finally:
        cli.process.kill()  # SIGKILL: no cleanup of its own
        await cli.process.wait()
    assert await helpers_left(deployer, joined | await workload_ids(deployer, plan.name)) == []
    summary = await deployer.delete(plan.name)
    assert not summary.errors, summary


async def helpers_of(deployer: Deployer, joined: set[str], status: str) -> list[str]:
    return [i.decode() for i in await _helpers(deployer, joined, "--filter", f"status={status}")]


def plan_yaml(plan: WorkloadPlan) -> str:
    return yaml.safe_dump(plan_to_mapping(plan))
