"""One replace at a time per plan name (issue 16 item 17), and a killed one never holds it."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy import Deployer, EngineTimeout, ReplaceInProgress, open_deployer
from asyncdeploy._owner import Owner
from asyncdeploy._reconcile import left_locks
from asyncdeploy.labels import LABEL_INSTANCE_OF, LABEL_LOCK
from asyncdeploy.replace._lock import LockRecord, lock_key, replace_lock, retire_locks
from tests.cli_runner import invoke_in_thread
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


async def test_a_slow_removal_of_a_stale_lock_never_lets_two_replaces_hold_it(
    deployer: Deployer, name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 item 4, staged with the real lock code on the real engine: a lock left by a dead
    replace; two replaces take it over at once, the first one's engine removals held back until
    the second holds the lock (a slow DELETE). At no moment do both hold it."""
    app = name("lockrace")
    key = lock_key(app)
    dead = attrs.evolve(Owner.this_process(), pid_started="1")  # this pid, another start: dead
    stale = LockRecord(owner=dead, started=time.time(), expires=time.time() + 600)
    assert await deployer.driver.hold_marker(key, stale.to_json(), labels={}) is None
    async with open_deployer(deployer.driver_name) as other:
        second_holds = anyio.Event()
        slowed = deployer.driver.session  # type: ignore[attr-defined]
        remove = type(slowed).remove_volume

        async def slow_remove(session: Any, volume: str) -> None:
            if session is slowed:  # the first replace's engine calls only
                with anyio.move_on_after(5):
                    await second_holds.wait()
            await remove(session, volume)

        monkeypatch.setattr(type(slowed), "remove_volume", slow_remove)
        holding: set[str] = set()
        overlaps: list[set[str]] = []
        refused: list[str] = []

        async def take(driver: Any, who: str) -> None:
            try:
                async with replace_lock(driver, app, bound=60, labels={}):
                    holding.add(who)
                    overlaps.append(set(holding))
                    if who == "second":
                        second_holds.set()
                    await anyio.sleep(1.5)
                    overlaps.append(set(holding))
                    holding.discard(who)
            except ReplaceInProgress:
                refused.append(who)

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, deployer.driver, "first")
            await anyio.sleep(0.3)  # the first has read the stale record and begun removing
            tg.start_soon(take, other.driver, "second")
        monkeypatch.undo()
        assert all(len(seen) == 1 for seen in overlaps), overlaps
        assert len(refused) <= 1 and overlaps, (overlaps, refused)
        for generation in await deployer.driver.markers.generations(key):  # type: ignore[attr-defined]
            await deployer.driver.markers._remove(generation.volume)  # type: ignore[attr-defined]


async def lock_volumes(deployer: Deployer, app: str) -> list[str]:
    """Every volume of ``app``'s replace lock (its generations, held or free)."""
    session = deployer.driver.session  # type: ignore[attr-defined]
    listed = await session.volumes(f"{LABEL_LOCK}={lock_key(app)}")
    return sorted(str(v["Name"]) for v in listed)


async def test_a_replace_leaves_nothing_of_its_lock_whether_it_replaced_or_failed(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Issue 32 item 3: a replace left its lock's free generation (``...lock.NAME.2``), which
    only the delete of one of the plan's instances removed; a replace that failed while the
    plan-named workload kept serving left it for good (its delete is of the plan's name: no
    instance's). The engines here held 200 and 240 of them after a day of test runs. Now
    a replace that ends leaves nothing, replaced or failed, and so does the plan's delete."""
    app = name("lockgone")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    with pytest.raises(EngineTimeout, match="not ready within 2 s"):
        await deployer.replace(
            plan(app, [server("v2", ready_after=-1)]), ready_timeout=2, new_name=f"{app}-next"
        )
    assert await lock_volumes(deployer, app) == [], "a failed replace leaves nothing"
    await deployer.replace(plan(app, [server("v2")], termination_grace_period_seconds=3))
    assert await lock_volumes(deployer, app) == [], "a replace leaves nothing"
    deleted = await invoke_in_thread("--driver", deployer.driver_name, "delete", app)
    assert deleted.exit_code == 0, deleted.output
    assert await live(deployer, app) == set()
    assert await lock_volumes(deployer, app) == []


async def test_a_retire_never_takes_the_lock_from_a_replace(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """The rule that keeps the lock safe: a retire takes the lock as a replace does, so a
    replace holding it (a recreate between its drain and its new instance: no instance of the
    plan) keeps it; a retire and a replace started together never both hold it, and a replace
    that holds it holds it to its end. Once nothing holds it, the retire leaves nothing."""
    app = name("lockretire")
    key = lock_key(app)
    async with replace_lock(deployer.driver, app, bound=60, labels={}) as held:
        assert await retire_locks(deployer.driver, [app]) == []
        assert await deployer.driver.read_marker(key) == held.to_json()
    async with open_deployer(deployer.driver_name) as other:
        refused: list[int] = []  # (refused: the retire held it then, as another replace would)
        broken: list[int] = []
        for round_ in range(4):
            async with replace_lock(deployer.driver, app, bound=60, labels={}):
                pass  # a replace's remains: a free generation

            async def replacing(round_: int = round_) -> None:
                await anyio.sleep(0.02 * round_)  # before, during and after the retire's hold
                try:
                    async with replace_lock(other.driver, app, bound=60, labels={}) as mine:
                        for _ in range(4):
                            if await other.driver.read_marker(key) != mine.to_json():
                                broken.append(round_)
                            await anyio.sleep(0.05)
                except ReplaceInProgress:
                    refused.append(round_)

            async with anyio.create_task_group() as tg:
                tg.start_soon(retire_locks, deployer.driver, [app])
                tg.start_soon(replacing)
        assert broken == [], "a replace lost the lock it held"
        async with replace_lock(other.driver, app, bound=60, labels={}):
            pass  # and a replace after them takes it
    await retire_locks(deployer.driver, [app])  # (the last round's retire may have done it)
    assert await lock_volumes(deployer, app) == []


async def test_reconcile_removes_the_lock_a_dead_replace_left(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """A replace killed after it drained the plan's last instance leaves its lock, held by a
    dead owner, and no instance: ``reconcile`` says so (``--dry-run``) and takes it over."""
    app = name("lockdead")
    dead = attrs.evolve(Owner.this_process(), pid_started="1")  # this pid, another start: dead
    stale = LockRecord(owner=dead, started=time.time(), expires=time.time() + 600)
    assert await deployer.driver.hold_marker(lock_key(app), stale.to_json(), labels={}) is None
    assert app in await left_locks(deployer.driver)
    # (a dry run of everything touches nothing: safe beside the other tests' workloads)
    said = await invoke_in_thread("--driver", deployer.driver_name, "reconcile", "--dry-run")
    assert said.exit_code == 0, said.output
    assert f"would remove the replace lock left of {app} (no instance of it is left)" in said.output
    assert await lock_volumes(deployer, app), "a dry run touches nothing"
    assert await retire_locks(deployer.driver, [app]) == [app]  # what reconcile runs
    assert await lock_volumes(deployer, app) == []
