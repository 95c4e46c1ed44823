"""The commands of docs/replace.md, run as written (with a plan.yaml of the test's own)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_INSTANCE_OF
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.test_replace import STAY

pytestmark = pytest.mark.anyio
DOC = Path(__file__).parents[2] / "docs" / "replace.md"


def commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


async def test_the_documented_commands_run_as_written(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = name("docs")
    (tmp_path / "plan.yaml").write_text(
        f"""
name: {app}
labels: {{{RUN_LABEL}: "{RUN_ID}", app: hello}}
pause_image: asyncdeploy-test/pause:latest
termination_grace_period_seconds: 2
containers:
  - name: server
    image: {BUSYBOX}
    command: [sh, -c, "touch /tmp/ready; {STAY}"]
    checks: {{readiness: {{exec: [test, -f, /tmp/ready], period_seconds: 1}}}}
"""
    )
    monkeypatch.chdir(tmp_path)
    driver = ["--driver", deployer.driver_name]
    assert (await invoke_in_thread(*driver, "create", "-f", "plan.yaml")).exit_code == 0
    documented = commands()
    assert [c[:2] for c in documented] == [["asyncdeploy", "replace"]] * 2 + [
        ["asyncdeploy", "create"],  # the same plan: unchanged
        ["asyncdeploy", "list"],
        ["asyncdeploy", "reconcile"],
        ["asyncdeploy", "reconcile"],
    ]
    for command in documented:
        result = await invoke_in_thread(*driver, *command[1:])
        assert result.exit_code == 0, (command, result.output)
    [instance] = await deployer.list({LABEL_INSTANCE_OF: app})
    assert instance.state == "running"
