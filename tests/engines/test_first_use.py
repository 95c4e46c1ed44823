"""The README's first Python snippet (examples/quickstart.py), run on each engine: its pre_stop
hook is a command the demo image has, and it succeeds (exit 0, not the 126 of a bare ``drain``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_WORKLOAD
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio
SNIPPET = Path(__file__).parents[2] / "examples" / "quickstart.py"  # README "python-api"


async def test_the_readmes_snippet_drains_through_its_hook(
    deployer: Deployer, tmp_path: Path
) -> None:
    name = f"t{RUN_ID}-quick-{deployer.driver_name}"
    text = SNIPPET.read_text()
    assert text.count('"llm"') == 4  # the only edits: the name, and the offline pause image
    text = text.replace('"llm"', repr(name)).replace(
        "    termination_grace_period_seconds=30,",
        f"    termination_grace_period_seconds=30,\n    pause_image={PAUSE!r},"
        f"\n    labels={{{RUN_LABEL!r}: {RUN_ID!r}}},",
    )
    script = tmp_path / "quickstart.py"
    script.write_text(text)
    env = {**os.environ, "ASYNCDEPLOY_DRIVER": deployer.driver_name}
    done = await anyio.run_process([sys.executable, str(script)], env=env, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    [hook] = [line for line in out.splitlines() if line.startswith("PreStopFinished(")]
    assert "exit_code=0" in hook and "timed_out=False" in hook, out
    assert "DrainFinished(" in out.splitlines()[-1]
    assert await deployer.list({RUN_LABEL: RUN_ID, LABEL_WORKLOAD: name}) == []
