"""The examples/ scripts, run for real against each engine."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import aiohttp
import anyio
import pytest
from aiohttp import web

from asyncdeploy import Deployer
from asyncdeploy.plan import plan_to_mapping
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio
EXAMPLES = Path(__file__).parents[2] / "examples"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.parametrize("script", ["events.py", "embedded.py"])
async def test_script_runs(deployer: Deployer, script: str) -> None:
    result = await anyio.run_process(
        [sys.executable, str(EXAMPLES / script), "--driver", deployer.driver_name], check=False
    )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    if script == "events.py":
        assert "worker-0 drained and exited with 0" in out
        assert "done in" in out.strip().splitlines()[-1]
    else:
        assert "drained 2 containers" in out
        assert "the application's heartbeat kept beating" in out


async def test_control_plane_streams_drain_events_to_its_client(deployer: Deployer) -> None:
    """A web app deletes a workload and streams the drain to its own client, line by line."""
    control_plane = load("control_plane")
    plan = load("_plan").example_plan(f"example-cp-{deployer.driver_name}")
    runner = web.AppRunner(control_plane.make_app(deployer.driver_name))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{base}/workloads", json=plan_to_mapping(plan)) as created:
                assert (await created.json())["action"] == "created"
            async with client.delete(f"{base}/workloads/{plan.name}?grace=5") as response:
                assert response.status == 200
                lines = [json.loads(line) async for line in response.content if line.strip()]
            async with client.delete(f"{base}/workloads/{plan.name}") as missing:
                assert missing.status == 404
    finally:
        await runner.cleanup()
    kinds = [line["event"] for line in lines]
    assert kinds[0] == "DrainStarted" and kinds[-1] == "DrainFinished"
    assert kinds.count("SignalSent") == 2
    assert lines[-1]["totals"]["exited"] == 2


async def test_minimal_plan_goes_from_file_to_drained_through_the_cli(
    deployer: Deployer, tmp_path: Path
) -> None:
    """The README's first steps: create examples/plans/minimal.yaml, then delete it, by the CLI."""
    name = f"t{RUN_ID}-minimal-{deployer.driver_name}"
    text = (EXAMPLES / "plans" / "minimal.yaml").read_text()
    text = text.replace("name: hello", f"name: {name}\npause_image: {PAUSE}")
    text = text.replace("host_port: 18000", "host_port: null")
    text += f'labels:\n  {RUN_LABEL}: "{RUN_ID}"\n'  # quoted: an all-digit id is a YAML int
    plan = tmp_path / "minimal.yaml"
    plan.write_text(text)
    cli = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name]
    created = await anyio.run_process([*cli, "create", "-f", str(plan)], check=False)
    assert created.returncode == 0, created.stderr.decode()
    assert (await deployer.get(name)).state == "running"
    deleted = await anyio.run_process([*cli, "delete", name, "--output", "json"], check=False)
    assert deleted.returncode == 0, deleted.stderr.decode()
    last = json.loads(deleted.stdout.decode().strip().splitlines()[-1])
    assert last["event"] == "DrainFinished" and last["totals"]["exited"] == 1
    assert await deployer.list({RUN_LABEL: RUN_ID, "asyncdeploy.io/workload": name}) == []
