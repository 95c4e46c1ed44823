"""Issue 17 item 5 through the CLI on real engines: a plan cannot forge asyncdeploy's own labels,
so a later `replace` of a workload never drains another one as its "earlier instance"."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_INSTANCE_OF, LABEL_WORKLOAD
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio
SERVE = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]


def write_plan(tmp_path: Path, name: str, labels: dict[str, str]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "pause_image": PAUSE,
                "termination_grace_period_seconds": 5,
                "labels": {RUN_LABEL: RUN_ID, **labels},
                "containers": [{"name": "server", "image": BUSYBOX, "command": SERVE}],
            }
        )
    )
    return str(path)


async def cli(driver: str, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", driver, *args], check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_a_forged_instance_label_is_refused_and_replace_drains_only_its_own(
    deployer: Deployer, name: Any, tmp_path: Path
) -> None:
    driver = deployer.driver_name
    other, forger, bystander = name("other"), name("forger"), name("bystander")
    code, _, err = await cli(driver, "create", "-f", write_plan(tmp_path, other, {}))
    assert code == 0, err

    forged = write_plan(tmp_path, forger, {LABEL_INSTANCE_OF: other})
    code, out, err = await cli(driver, "create", "-f", forged)
    assert code == 2, out + err  # an invalid plan, before any engine call
    assert "reserved" in err and LABEL_INSTANCE_OF in err and "Traceback" not in err, err
    code, out, err = await cli(driver, "replace", "-f", forged)
    assert code == 2, out + err
    # a look-alike key outside the reserved domain is the user's own, and is kept
    lookalike = write_plan(tmp_path, bystander, {"replace.example.com/instance-of": other})
    code, _, err = await cli(driver, "create", "-f", lookalike)
    assert code == 0, err
    assert await deployer.list({RUN_LABEL: RUN_ID, LABEL_WORKLOAD: forger}) == []

    code, out, err = await cli(
        driver, "replace", "-f", write_plan(tmp_path, other, {}), "--output", "json"
    )
    assert code == 0, out + err
    drained = {
        json.loads(line)["workload"]
        for line in out.splitlines()
        if line.startswith("{") and json.loads(line).get("event") == "DrainFinished"
    }
    assert drained == {other}, out
    [still] = await deployer.list({RUN_LABEL: RUN_ID, LABEL_WORKLOAD: bystander})
    assert still.state == "running"
