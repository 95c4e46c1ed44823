"""A remote Docker engine (issue 31 item 3): a second daemon on TCP with TLS, in its own network
namespace (``ci/remote-docker.sh``), whose containers' addresses this host cannot reach.

Named by Docker's own variables (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``)
and by a docker context made by the real docker CLI (``docker context create`` / ``use``):
create, wait ready, a delete under traffic that loses nothing, and the workload lands there,
not on the local engine; a gated drain there works because the checks and hooks run inside the
workload's network namespace, never from this host.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncdeploy import Deployer, WorkloadPlan, open_deployer
from asyncdeploy._events import SignalSent
from asyncdeploy.labels import LABEL_WORKLOAD
from asyncdeploy.plan import plan_to_mapping
from tests.engines.conftest import RUN_ID, RUN_LABEL
from tests.engines.remote import (
    Remote,
    Traffic,
    demo_plan,
    docker_context,
    published,
    remote_daemon,
    without,
)

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.engine]

GATE_IMAGE = "localhost/asyncdeploy/gate:latest"
STOCK_IMAGE = "asyncdeploy-test/stock-engine:latest"


@pytest.fixture
def remote() -> Remote:
    return remote_daemon()


@pytest.fixture
async def on_remote(remote: Remote, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Deployer]:
    """A deployer on the remote daemon, named by Docker's variables alone."""
    for key, value in remote.environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    async with open_deployer() as deployer:  # no driver named: DOCKER_HOST names Docker
        try:
            yield deployer
        finally:
            with anyio.CancelScope(shield=True):
                await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)


async def local_names() -> set[str]:
    async with open_deployer("docker", url="unix:///var/run/docker.sock") as local:
        return {s.name for s in await local.list({RUN_LABEL: RUN_ID})}


async def delete_under_traffic(deployer: Deployer, name: str, base: str) -> Traffic:
    traffic = Traffic(base)
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for path in ["/short"] * 3 + ["/long?seconds=2"] * 3:
                tg.start_soon(traffic.loop, path)
            await anyio.sleep(1.5)  # long requests are mid-way when the delete starts
            async with deployer.terminate(name) as drain:
                async for event in drain:
                    traffic.signalled = traffic.signalled or isinstance(event, SignalSent)
    [summary] = drain.summaries
    assert summary.ok, summary.errors
    assert summary.count("killed") == 0, summary
    return traffic


async def test_a_tls_remote_daemon_creates_waits_and_drains_losing_nothing(
    on_remote: Deployer, remote: Remote, name: Callable[[str], str]
) -> None:
    info = await on_remote.engine_info()
    assert info.engine == "docker"
    assert on_remote.driver.url == f"https://{remote.address}:2376"  # type: ignore[attr-defined]
    plan = demo_plan(name("remote"), remote)
    await on_remote.create(plan)
    status = await on_remote.wait_ready(plan.name, timeout=90)
    port = published(status.ports, 8080)
    assert plan.name not in await local_names()  # it is the remote daemon's, not this one's

    traffic = await delete_under_traffic(on_remote, plan.name, f"http://{remote.address}:{port}")
    assert traffic.lost == [], traffic.lost
    assert traffic.counts["ok"] >= 6, traffic.counts
    assert await on_remote.list({LABEL_WORKLOAD: plan.name}) == []


async def test_docker_tls_variables_as_the_docker_cli_reads_them(remote: Remote) -> None:
    """Any value of ``DOCKER_TLS_VERIFY`` verifies, and a ``tcp://`` address without a port is
    TLS's 2376, as the docker CLI has them (aiodocker alone only knows ``1``)."""
    env = {
        **without(os.environ, "DOCKER_CONTEXT", "ASYNCDEPLOY_DRIVER"),
        **remote.environment(),
        "DOCKER_HOST": f"tcp://{remote.address}",
        "DOCKER_TLS_VERIFY": "true",
    }
    done = await anyio.run_process(
        [sys.executable, "-m", "asyncdeploy", "version", "-o", "json"], env=env, check=False
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert json.loads(done.stdout)["engine"]["engine"] == "docker", done.stdout


async def test_a_docker_context_made_by_the_docker_cli_is_the_engine(
    remote: Remote, name: Callable[[str], str], tmp_path: Path
) -> None:
    """``docker context create`` + ``docker context use``, then the CLI with neither
    ``DOCKER_HOST`` nor a driver: the context's engine (its endpoint and TLS files); and
    ``--docker-context`` beats a ``DOCKER_HOST`` naming the local engine."""
    docker, env = await docker_context(remote, tmp_path)
    await anyio.run_process([docker, "context", "use", "far"], env=env, check=True)

    plan = demo_plan(name("ctx"), remote)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_mapping(plan)))

    async def cli(*args: str, environ: dict[str, str] = env) -> tuple[int, str, str]:
        done = await anyio.run_process(
            [sys.executable, "-m", "asyncdeploy", *args], env=environ, check=False
        )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    try:
        code, out, err = await cli("create", "-f", str(path), "--wait", "--timeout", "90s")
        assert code == 0, out + err
        assert plan.name not in await local_names()
        code, out, err = await cli("get", plan.name, "-o", "json")
        assert code == 0, err
        assert json.loads(out)["driver"] == "docker"
        # --docker-context beats DOCKER_HOST (the local engine here), as docker --context does
        local = {**env, "DOCKER_HOST": "unix:///var/run/docker.sock"}
        code, out, err = await cli("get", plan.name, environ=local)
        assert code == 1, out + err  # not on the local engine
        code, out, err = await cli("--docker-context", "far", "delete", plan.name, environ=local)
        assert code == 0, out + err
    finally:
        await cli("delete", plan.name, "--ignore-not-found", "--grace-period-seconds", "0")


def gated_plan(name: str, remote: Remote) -> WorkloadPlan:
    engine: dict[str, Any] = {
        "name": "engine",
        "image": STOCK_IMAGE,
        "args": ["--port", "8001", "--load-seconds", "2", "--token-ms", "50"],
        "ports": [{"container_port": 8000, "host_ip": remote.address}],
        "gate": {"upstream": 8001, "ready": {"path": "/health"}, "image": GATE_IMAGE},
    }
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": "asyncdeploy-test/pause:latest",
            "termination_grace_period_seconds": 20,
            "containers": [engine],
        }
    )


async def test_a_gated_drain_on_the_remote_daemon(
    on_remote: Deployer, remote: Remote, name: Callable[[str], str]
) -> None:
    plan = gated_plan(name("rgate"), remote)
    await on_remote.create(plan)
    await on_remote.wait_ready(plan.name, timeout=30)
    status = await on_remote.get(plan.name)
    port = published(status.ports, 8000)
    traffic = Traffic(f"http://{remote.address}:{port}")
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(traffic.loop, "/short")
            await anyio.sleep(1.0)
            summary = await on_remote.delete(plan.name)
    assert summary.ok and summary.count("killed") == 0, summary
    assert traffic.lost == [], traffic.lost
