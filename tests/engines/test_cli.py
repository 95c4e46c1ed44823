"""The CLI end to end on real engines: create from a file, delete with JSON events."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import yaml
from click.testing import CliRunner

from asyncdeploy import Deployer
from asyncdeploy.cli import main
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout


async def test_delete_prints_one_json_object_per_event(deployer: Deployer, tmp_path: Path) -> None:
    name = f"t{RUN_ID}-cli"
    plan = {
        "name": name,
        "labels": {RUN_LABEL: RUN_ID},
        "pause_image": PAUSE,
        "termination_grace_period_seconds": 4,
        "containers": [
            {"name": "setup", "role": "init", "image": BUSYBOX, "command": ["true"]},
            {
                "name": "app",
                "image": BUSYBOX,
                "command": ["graceful", "app", "1"],
                "env": {"MARKER_FILE": "/tmp/m"},
            },
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
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
