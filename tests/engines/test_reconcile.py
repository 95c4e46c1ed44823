"""Recovery after the deployer itself died (issue 17 item 5): ``kill -9`` of the CLI at a step
of create, delete and replace; ``list`` marks what it left, ``reconcile`` finishes it."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from asyncdeploy import Deployer, WorkloadNotFound
from asyncdeploy.drivers.engine._state import snapshot
from asyncdeploy.labels import LABEL_INSTANCE_OF, LABEL_WORKLOAD
from tests.cli_runner import invoke_in_thread
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import graceful, plan, plan_file, read_markers
from tests.polling import until

pytestmark = pytest.mark.anyio


def marking(name: str, markers: Path, drain: float, role: str = "run") -> dict[str, object]:
    """A graceful container as a plan file writes it (an init one never ends by itself)."""
    return {
        "name": name,
        "image": BUSYBOX,
        "role": role,
        "command": ["graceful", name, str(drain)],
        "env": {"MARKER_FILE": "/out/markers"},
        "mounts": [{"source": str(markers), "target": "/out"}],
    }


async def listed(driver: str, selector: str) -> dict[str, dict[str, object]]:
    result = await invoke_in_thread("--driver", driver, "list", "-l", selector, "-o", "json")
    assert result.exit_code == 0, result.output
    return {w["name"]: w for w in json.loads(result.stdout)}


async def reconcile(driver: str, *args: str) -> tuple[int, str, list[dict[str, object]]]:
    result = await invoke_in_thread(
        "--driver", driver, "reconcile", "-l", f"{RUN_LABEL}={RUN_ID}", *args
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result.exit_code, result.stderr, lines


async def half_drained(driver: str, app: str) -> bool:
    shown = (await listed(driver, f"{RUN_LABEL}={RUN_ID}")).get(app, {})
    return str(shown.get("unfinished", "")).startswith("half-drained")


async def gone(deployer: Deployer, name: str) -> bool:
    try:
        await deployer.driver.get(name)
    except WorkloadNotFound:
        return True
    return False


async def test_a_create_killed_at_its_init_container_is_marked_and_finished(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app, driver = name("killcreate"), deployer.driver_name
    path = plan_file(
        tmp_path,
        app,
        [marking("setup", markers, 1, role="init"), marking("server", markers, 1)],
        termination_grace_period_seconds=10,
    )
    cli = await start_cli(driver, "create", "-f", str(path), "-o", "json")
    await until(lambda: ("setup", "start") in read_markers(markers), timeout=30)
    cli.send(signal.SIGKILL)
    await cli.finish()

    shown = (await listed(driver, f"{RUN_LABEL}={RUN_ID}"))[app]
    assert str(shown["unfinished"]).startswith("half-made: a pause container without its run")
    text = await invoke_in_thread("--driver", driver, "list", "-l", f"{RUN_LABEL}={RUN_ID}")
    assert "half-made" in text.stdout and "asyncdeploy reconcile" in text.stderr

    code, err, _ = await reconcile(driver, "--dry-run")
    assert code == 0 and f"would finish {app}" in err and "drain setup (running" in err, err
    assert not await gone(deployer, app), "a dry run touches nothing"

    code, err, lines = await reconcile(driver, "-o", "json")
    assert code == 0, err
    kinds = [line.get("event") for line in lines if line.get("workload") == app]
    assert "SignalSent" in kinds and kinds[-2:] == ["PauseRemoved", "DrainFinished"], kinds
    assert ("setup", "drained-ok") in read_markers(markers), "drained with its signal, not killed"
    assert await gone(deployer, app)


async def test_create_again_after_a_killed_create_repairs_it(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """Re-running the create that was killed is what a user does (kubectl apply again): its
    creator is dead, so the create drains what was left (the init container gets its signal)
    and makes the workload, instead of refusing it as another create's work."""
    app, driver = name("killrecreate"), deployer.driver_name
    # the init container runs until signalled the first time, and ends at once the second
    setup = marking("setup", markers, 1, role="init")
    setup["command"] = ["sh", "-c", "[ -e /out/again ] && exit 0; exec graceful setup 1"]
    path = plan_file(
        tmp_path, app, [setup, marking("server", markers, 1)], termination_grace_period_seconds=10
    )
    cli = await start_cli(driver, "create", "-f", str(path), "-o", "json")
    await until(lambda: ("setup", "start") in read_markers(markers), timeout=30)
    cli.send(signal.SIGKILL)
    await cli.finish()
    (markers / "again").touch()

    again = await invoke_in_thread("--driver", driver, "create", "-f", str(path), "-o", "json")
    assert again.exit_code == 0, again.output
    result = json.loads(again.stdout.splitlines()[-1])
    assert result["action"] == "replaced", result
    assert ("setup", "drained-ok") in read_markers(markers), "drained with its signal, not killed"
    status = await deployer.wait_ready(app, timeout=60)
    assert status.unfinished is None, status


async def test_a_delete_killed_mid_drain_is_marked_half_drained_and_finished(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    app, driver = name("killdelete"), deployer.driver_name
    await deployer.create(
        plan(app, [graceful("drainer", 2, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(app, timeout=30)
    cli = await start_cli(driver, "delete", app, "-o", "json")
    await cli.next_event("SignalSent")
    cli.send(signal.SIGKILL)
    await cli.finish()
    await until(lambda: ("drainer", "drained-ok") in read_markers(markers), timeout=30)

    await until(lambda: half_drained(driver, app), timeout=15)
    code, err, lines = await reconcile(driver, "-o", "json")
    assert code == 0, err
    assert lines[-1]["event"] == "DrainFinished" and lines[-1]["workload"] == app
    assert any(line.get("event") == "PauseRemoved" for line in lines)
    assert await gone(deployer, app)


async def test_a_replace_killed_while_its_new_instance_is_made_leaves_the_old_serving(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app, driver = name("killrep"), deployer.driver_name
    await deployer.create(
        plan(app, [graceful("old", 1, markers)], termination_grace_period_seconds=10)
    )
    before = await deployer.wait_ready(app, timeout=30)
    path = plan_file(
        tmp_path,
        app,
        [marking("setup", markers, 1, role="init"), marking("server", markers, 1)],
        termination_grace_period_seconds=10,
    )
    cli = await start_cli(driver, "replace", "-f", str(path), "-o", "json")
    await until(lambda: ("setup", "start") in read_markers(markers), timeout=30)
    cli.send(signal.SIGKILL)
    await cli.finish()
    instances = await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID})
    assert [str(w.unfinished).split(":")[0] for w in instances] == ["half-made"]

    code, err, _ = await reconcile(driver)
    assert code == 0, err
    assert await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID}) == []
    assert (await deployer.get(app)).containers == before.containers, "the old one untouched"
    assert ("old", "got-TERM") not in read_markers(markers)


async def test_a_replace_killed_mid_drain_of_the_old_is_finished_and_the_new_serves(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    app, driver = name("killrepd"), deployer.driver_name
    await deployer.create(
        plan(app, [graceful("old", 2, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(app, timeout=30)
    path = plan_file(
        tmp_path, app, [marking("server", markers, 1)], termination_grace_period_seconds=10
    )
    cli = await start_cli(driver, "replace", "-f", str(path), "-o", "json")
    await cli.next_event("SignalSent")
    cli.send(signal.SIGKILL)
    await cli.finish()
    await until(lambda: ("old", "drained-ok") in read_markers(markers), timeout=30)
    await until(lambda: half_drained(driver, app), timeout=15)

    code, err, lines = await reconcile(driver, "-o", "json")
    assert code == 0, err
    assert [line["workload"] for line in lines if line.get("event") == "DrainFinished"] == [app]
    assert await gone(deployer, app)
    [new] = await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID})
    assert new.unfinished is None and new.state == "running"
    assert (await deployer.get(app)).name == new.name, "the plan's name finds the new one"


async def claim_recorded(deployer: Deployer, workload: str) -> bool:
    """Whether the workload's drain has written its claim record."""
    driver = deployer.driver
    listed = await driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]
    [pause] = [r for r in snapshot(workload, listed).containers if r.role == "pause"]
    return await driver.ops.read_claim(pause) is not None  # type: ignore[attr-defined, no-any-return]


async def test_a_delete_killed_mid_drain_is_marked_by_its_dead_claim_and_drained_properly(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The claim record names the dead owner: marked at once, while the app still drains; the
    reconcile takes the drain over and waits for the app's own end (no SIGKILL). (The owner
    is killed once it has written its record: that comes after its signals, a second in.)"""
    app, driver = name("killclaim"), deployer.driver_name
    # a 12 s drain: on a loaded machine the list and the reconcile's own start still come
    # while the app drains (at 6 s it had sometimes exited first: "already-exited")
    await deployer.create(
        plan(app, [graceful("drainer", 12, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(app, timeout=30)
    cli = await start_cli(driver, "delete", app, "-o", "json")
    await cli.next_event("SignalSent")
    await until(lambda: claim_recorded(deployer, app), timeout=15, interval=0.2)
    cli.send(signal.SIGKILL)
    await cli.finish()

    shown = (await listed(driver, f"{RUN_LABEL}={RUN_ID}"))[app]
    assert "died mid-drain" in str(shown["unfinished"]), shown
    assert shown["ready"] == {"ready": 0, "total": 1}, shown  # issue 32 item 2: never 1/1
    assert ("drainer", "drained-ok") not in read_markers(markers), "marked while it drains"
    code, err, lines = await reconcile(driver, "-o", "json")
    assert code == 0, err
    last = lines[-1]
    assert last["event"] == "DrainFinished" and last["workload"] == app
    assert [(c["outcome"], c["exit_code"]) for c in last["containers"] if c["role"] == "run"] == [
        ("exited", 0)
    ]
    assert ("drainer", "drained-ok") in read_markers(markers)
    assert not any(line.get("event") == "ContainerForceKilled" for line in lines)
    assert await gone(deployer, app)
