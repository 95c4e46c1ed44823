"""States a kubectl user can read (issue 24 item 6, issue 26's output habits), through the real
CLI on Docker and Podman: a drain shows as ``draining`` with the time left (table and JSON);
``list -w -o json`` prints kubectl's watch events (ADDED, MODIFIED, DELETED), a delete as
deleted, never half-drained; ``get -o json`` is one object with state, ready, age and created;
``create --wait`` that times out says what it left and how to remove it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncdeploy import Deployer
from tests.cli_runner import invoke_in_thread
from tests.engines.cli_process import start_cli
from tests.engines.conftest import RUN_ID, RUN_LABEL
from tests.engines.helpers import graceful, plan, plan_file, started
from tests.engines.test_replace_signals import never_ready

pytestmark = pytest.mark.anyio


async def test_a_drain_shows_as_draining_and_a_watch_sees_a_delete_as_deleted(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    app = name("states")
    watch_args = ["list", "-w", "-o", "json", "-l", f"{RUN_LABEL}={RUN_ID}"]
    events: list[dict[str, object]] = []
    async with await anyio.open_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name, *watch_args],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as watch:
        assert watch.stdout is not None
        lines = BufferedByteReceiveStream(watch.stdout)

        async def read_until(kind: str) -> None:
            while True:
                event = json.loads(await lines.receive_until(b"\n", 1 << 20))
                if event["object"]["name"] == app:
                    events.append(event)
                    if event["type"] == kind:
                        return

        try:
            with anyio.fail_after(60):
                await deployer.create(
                    plan(app, [graceful("app", 8, markers)], termination_grace_period_seconds=20)
                )
                await started(markers, "app")
                await read_until("ADDED")
                delete = await start_cli(deployer.driver_name, "delete", app, "-o", "json")
                await delete.next_event("SignalSent")
                # (the app drains 8 s: time for both looks on a loaded machine)
                shown = await invoke_in_thread(
                    "--driver", deployer.driver_name, "get", app, "-o", "json"
                )
                listed = await invoke_in_thread(
                    "--driver", deployer.driver_name, "list", "-l", f"{RUN_LABEL}={RUN_ID}"
                )
                await read_until("DELETED")
                code, stderr = await delete.finish()
        finally:
            watch.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await watch.wait()

    assert code == 0, stderr
    assert listed.exit_code == 0 and shown.exit_code == 0, listed.output + shown.output
    row = next(line for line in listed.stdout.splitlines() if line.startswith(app))
    assert row.split()[1] == "draining" and "s left)" in row, listed.stdout
    assert row.split()[4] == "0/1", listed.stdout  # issue 32 item 2: a draining app is not ready
    got = json.loads(shown.stdout)
    assert isinstance(got, dict) and got["state"] == "draining", got
    assert got["ready"] == {"ready": 0, "total": 1}, got
    assert 0 < got["drain_seconds_left"] <= 20 and got["unfinished"] is None
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED", kinds
    states = [e["object"]["state"] for e in events]  # type: ignore[index]
    assert "draining" in states, states
    readiness = {e["object"]["state"]: e["object"]["ready"]["ready"] for e in events}  # type: ignore[index]
    assert readiness["draining"] == 0, events  # the watch too, with no check per poll
    seen = [(e["type"], e["object"]["state"], e["object"]["unfinished"]) for e in events]  # type: ignore[index]
    assert not any(unfinished for _, _, unfinished in seen), seen


async def test_get_is_one_object_with_state_ready_and_age_and_list_has_an_age(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    app = name("getone")
    await deployer.create(plan(app, [graceful("app", 0, markers)]))
    await deployer.wait_ready(app, timeout=20)
    driver = ["--driver", deployer.driver_name]
    got = json.loads((await invoke_in_thread(*driver, "get", app, "-o", "json")).stdout)
    assert isinstance(got, dict) and got["name"] == app
    assert got["state"] == "running" and got["ready"] == {"ready": 1, "total": 1}
    assert got["age"].endswith("s") and got["created"].startswith("20"), got
    listed = (await invoke_in_thread(*driver, "list", "-l", f"{RUN_LABEL}={RUN_ID}")).stdout
    header = listed.splitlines()[0].split()
    assert header[:6] == ["NAME", "STATE", "READY", "PORTS", "GRACE", "AGE"], header


async def test_a_create_wait_that_times_out_says_what_it_left_and_how_to_remove_it(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app = name("waitleft")
    path = plan_file(tmp_path, app, [never_ready(markers)], termination_grace_period_seconds=2)
    cli = await start_cli(
        deployer.driver_name, "create", "-f", str(path), "--wait", "--timeout", "3s"
    )
    code, stderr = await cli.finish()
    assert code == 1, stderr
    assert f"{app} is left running, not ready after 3 s" in stderr, stderr
    assert f"asyncdeploy delete {app}` removes it" in stderr
    assert (await deployer.get(app)).name == app, "left as said"
