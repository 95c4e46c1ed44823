"""One replace at a time per plan name (issue 16 item 17), and a killed one never holds it."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer, ReplaceInProgress
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.replace._lock import lock_key
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import plan, plan_file
from tests.engines.test_replace import STAY, server
from tests.polling import until

pytestmark = pytest.mark.anyio


def slow_server(ready_after: float) -> dict[str, object]:
    return {
        "name": "server",
        "image": BUSYBOX,
        "command": ["sh", "-c", f"sleep {ready_after}; touch /tmp/ready; {STAY}"],
        "checks": {"readiness": {"exec": ["test", "-f", "/tmp/ready"], "period_seconds": 1}},
    }


async def live(deployer: Deployer, app: str) -> set[str]:
    """Every workload serving ``app``: the one of that name and its instances."""
    names = {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})}
    return {n for n in names if n == app} | {
        w.name for w in await deployer.list({LABEL_INSTANCE_OF: app, RUN_LABEL: RUN_ID})
    }


async def test_a_second_replace_at_once_is_refused_and_one_instance_remains(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    app = name("lock")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    path = plan_file(tmp_path, app, [slow_server(12)], termination_grace_period_seconds=3)
    first = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    await until(lambda: _has_instance(deployer, app), timeout=30)
    second = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    code2, err2 = await second.finish()
    code1, err1 = await first.finish()

    assert code2 == 1, err2
    assert f"another replace of {app!r} is running" in err2 and "Traceback" not in err2
    assert code1 == 0, err1
    assert len(await live(deployer, app)) == 1, "one instance serves the plan"


async def _has_instance(deployer: Deployer, app: str) -> bool:
    return any(n != app for n in await live(deployer, app))


async def test_a_killed_replace_leaves_no_lock_that_stops_the_next(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    app = name("lockkill")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    path = plan_file(tmp_path, app, [slow_server(30)], termination_grace_period_seconds=3)
    killed = await start_cli(deployer.driver_name, "replace", "-f", str(path), "-o", "json")
    await until(lambda: _has_instance(deployer, app), timeout=30)
    await anyio.sleep(1)
    killed.send(signal.SIGKILL)
    await killed.finish()
    record = await deployer.driver.hold_marker(lock_key(app), "probe", labels={})
    assert record, "the killed replace left its lock behind (what this test is about)"

    quick = plan_file(tmp_path, app, [slow_server(0)], termination_grace_period_seconds=3)
    again = await start_cli(deployer.driver_name, "replace", "-f", str(quick), "-o", "json")
    code, err = await again.finish()
    assert code == 0, err
    assert len(await live(deployer, app)) == 1, "the killed one's instance was drained too"
    assert await deployer.driver.hold_marker(lock_key(app), "probe", labels={}) is None
    await deployer.driver.drop_marker(lock_key(app), "probe")


async def test_the_library_refuses_a_replace_while_another_holds_the_lock(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    app = name("locklib")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    held = anyio.Event()

    async def on_ready(_: object) -> None:
        held.set()
        with pytest.raises(ReplaceInProgress, match="another replace"):
            await deployer.replace(plan(app, [server("v3")]))

    await deployer.replace(plan(app, [server("v2")]), on_ready=on_ready)
    assert held.is_set() and len(await live(deployer, app)) == 1
