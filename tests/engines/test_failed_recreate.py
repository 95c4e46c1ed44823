"""A recreate whose new instance fails (issue 24 item 2): the old plan is brought back from the
plan its workload recorded, and serves again, with its data; where that fails too, the error
says plainly that nothing serves and what to run. Never "the old instance stays" after it was
drained. On Docker and Podman, with the README's shape of plan: a fixed host port (so ``auto``
chooses recreate) and a named volume.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
import yaml

from asyncdeploy import Checks, Deployer, Mount, Probe, ReplaceFailed
from asyncdeploy.plan import WorkloadPlan, plan_to_mapping
from asyncdeploy.replace.events import ReplaceRestored, ReplaceRolledBack
from tests.cli_runner import invoke_in_thread
from tests.engines.helpers import plan
from tests.engines.test_plan_volumes import read_mark, volume_exists, write_mark
from tests.engines.test_replace_strategies import HTTPD, free_port, serves, web_server
from tests.polling import until

pytestmark = pytest.mark.anyio

NEVER_READY = "mkdir -p /www && echo $VERSION > /www/index.html; exec httpd -f -p 8080 -h /www"


def web(app: str, version: str, port: int, *, ready: bool = True) -> WorkloadPlan:
    """busybox httpd on ``port`` with the plan's cache volume; ready once it has started (or
    never)."""
    cache = Mount(source=f"{app}-cache", target="/cache", type="volume")
    server = attrs.evolve(
        web_server(version, port, mounts=[cache]),
        command=["sh", "-c", HTTPD if ready else NEVER_READY],
        checks=Checks(readiness=Probe(exec=["test", "-f", "/tmp/ready"], period_seconds=1)),
    )
    return plan(app, [server], termination_grace_period_seconds=2)


async def test_a_failed_recreate_brings_the_old_plan_back_with_its_data(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    app, port = name("restore"), free_port()
    await deployer.create(web(app, "v1", port))
    await deployer.wait_ready(app, timeout=20)
    await until(lambda: serves(port, "v1"), timeout=15)
    await write_mark(deployer, app)
    path = tmp_path / "v2.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(web(app, "v2", port, ready=False))))

    result = await invoke_in_thread(
        "--driver", deployer.driver_name, "replace", "-f", str(path), "--timeout", "3s"
    )
    assert result.exit_code == 1, result.output
    err = result.stderr
    assert "recreate (host port" in err, err
    assert "the old instance was drained before it (recreate)" in err, err
    assert f"the previous plan serves again as {app}" in err, err
    assert "keeps serving" not in err and "the old instance stays" not in err, err
    assert "Traceback" not in err
    await until(lambda: serves(port, "v1"), timeout=15)
    assert await read_mark(deployer, app) == "kept"
    assert (await deployer.get(app)).name == app, "the old instance, under its own name"


async def test_when_the_old_plan_cannot_come_back_the_error_says_nothing_serves(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Something else takes the host port while the old instance is drained: neither the new
    instance nor the old plan can bind it."""
    app, port = name("noserve"), free_port()
    await deployer.create(web(app, "v1", port))
    await deployer.wait_ready(app, timeout=20)
    await write_mark(deployer, app)
    events: list[object] = []
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def on_event(event: object) -> None:
        events.append(event)
        if type(event).__name__ == "DrainFinished" and squatter.getsockname()[1] == 0:
            squatter.bind(("0.0.0.0", port))
            squatter.listen()

    try:
        with pytest.raises(ReplaceFailed) as failed:
            await deployer.replace(web(app, "v2", port), on_event=on_event, ready_timeout=10)
    finally:
        squatter.close()
    message = str(failed.value)
    assert message.startswith(f"nothing of {app!r} serves now"), message
    assert "asyncdeploy create -f" in message and failed.value.serving == ()
    assert not any(isinstance(e, ReplaceRolledBack) and e.old == "serving" for e in events)
    assert not any(isinstance(e, ReplaceRestored) for e in events)
    assert await volume_exists(deployer, f"{app}-cache"), "its data is kept"
    await deployer.create(web(app, "v1", port))  # what the message says to do
    await deployer.wait_ready(app, timeout=20)
    assert await read_mark(deployer, app) == "kept"
