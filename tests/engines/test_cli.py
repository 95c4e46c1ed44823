"""The CLI end to end on real engines: create from a file, delete with JSON events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncdeploy import Container, Deployer, EngineAPIError
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from tests import cli_runner
from tests.engines.conftest import BUSYBOX, RUN_ID
from tests.engines.helpers import plan, plan_file

pytestmark = pytest.mark.anyio


def invoke(*args: str) -> tuple[int, str]:
    result = cli_runner.invoke(*args)
    return result.exit_code, result.stdout


async def test_delete_prints_one_json_object_per_event(deployer: Deployer, tmp_path: Path) -> None:
    name = f"t{RUN_ID}-cli"
    containers = [
        {"name": "setup", "role": "init", "image": BUSYBOX, "command": ["true"]},
        {
            "name": "app",
            "image": BUSYBOX,
            "command": ["graceful", "app", "1"],
            "env": {"MARKER_FILE": "/tmp/m"},
        },
    ]
    path = plan_file(tmp_path, name, containers, termination_grace_period_seconds=4)
    driver = deployer.driver_name
    code, out = await anyio.to_thread.run_sync(
        invoke, "--driver", driver, "create", "-f", str(path), "-o", "json"
    )
    assert code == 0, out
    assert json.loads(out)["action"] == "created"
    code, out = await anyio.to_thread.run_sync(
        invoke, "--driver", driver, "delete", name, "--output", "json"
    )
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["event"] == "DrainStarted"
    assert all({"event", "workload", "elapsed"} <= line.keys() for line in lines)
    signalled = [line for line in lines if line["event"] == "SignalSent"]
    assert signalled == [{**signalled[0], "container": "app", "role": "run"}]
    assert lines[-2]["event"] == "PauseRemoved" and lines[-2]["role"] == "pause"
    last = lines[-1]
    assert last["event"] == "DrainFinished"
    by_name = {c["name"]: c for c in last["containers"]}
    assert by_name["app"] == {
        "name": "app",
        "role": "run",
        "outcome": "exited",
        "exit_code": 0,
        "seconds": by_name["app"]["seconds"],
    }
    assert by_name["setup"]["outcome"] == "already-exited"
    code, out = await anyio.to_thread.run_sync(invoke, "--driver", driver, "delete", name)
    assert code == 1


async def test_a_failed_delete_still_prints_its_summary_table(
    deployer: Deployer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container that cannot be removed fails the delete (exit 1), and the table that says
    which one is still printed: that is when it matters most."""
    name = f"t{RUN_ID}-cli-fail-{deployer.driver_name}"
    app = Container(name="app", image=BUSYBOX, command=["graceful", "app", "0"])
    await deployer.create(plan(name, [app]))
    await deployer.wait_ready(name, timeout=30)  # its TERM trap set (else: 143, seen under load)
    remove = EngineContainerOps.remove

    async def refuse_app(self: EngineContainerOps, ref: Any) -> None:
        if ref.name == "app":
            raise EngineAPIError(
                "remove app: refused by the test", engine=self.session.engine, status=500
            )
        await remove(self, ref)

    monkeypatch.setattr(EngineContainerOps, "remove", refuse_app)
    code, out = await anyio.to_thread.run_sync(
        invoke, "--driver", deployer.driver_name, "delete", name
    )
    monkeypatch.undo()
    assert code == 1, out
    table = out.splitlines()
    assert table[0].startswith(f"{name}: drained in ")
    assert table[1].split() == ["CONTAINER", "ROLE", "OUTCOME", "EXIT", "SECONDS"]
    assert table[2].split()[:4] == ["app", "run", "exited", "0"]
    errors = [line for line in table if line.startswith("error: ")]
    assert errors[0].startswith("error: remove app: ") and "refused by the test" in errors[0]
