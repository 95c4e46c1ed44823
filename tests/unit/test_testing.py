"""``asyncdeploy.testing``: a whole driver without an engine, for users' own tests. Its workloads
live, wait, drain (the real engine drain, its events and summaries), fail as scripted, and take
a kill; it imports no engine client; examples/testing.py runs on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from asyncdeploy import (
    Container,
    CreateError,
    Deployer,
    DrainError,
    DrainEvent,
    DrainFinished,
    WorkloadPlan,
)
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.testing import FakeDriver, refused

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def plan(name: str = "llm", grace: int = 30, image: str = "any/image:1") -> WorkloadPlan:
    return WorkloadPlan(
        name=name,
        termination_grace_period_seconds=grace,
        labels={"team": "ml"},
        containers=[Container(name="server", image=image)],
    )


async def test_a_workload_lives_and_drains_as_on_an_engine() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    assert (await deployer.create(plan())).action == "created"
    assert (await deployer.create(plan())).action == "unchanged"
    assert [w.name for w in await deployer.list("team=ml")] == ["llm"]
    assert (await deployer.wait_ready("llm", timeout=10)).state == "running"
    driver.script("llm", "server", drain=12.0)
    started = anyio.current_time()
    async with deployer.terminate("llm") as drain:
        kinds = [type(e).__name__ async for e in drain]
    assert kinds == [
        "DrainStarted",
        "SignalSent",
        "ContainerExited",
        "ContainerRemoved",
        "PauseRemoved",
        "DrainFinished",
    ]
    assert anyio.current_time() - started == pytest.approx(12, abs=0.5)
    [summary] = drain.summaries
    assert [(c.name, c.outcome, c.exit_code) for c in summary.containers if c.role == "run"] == [
        ("server", "exited", 0)
    ]
    assert await deployer.list() == [] and driver.plans == {}


async def test_a_container_that_ignores_its_signal_is_killed_at_the_deadline() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(plan(grace=5))
    driver.script("llm", "server", ignores_term=True)
    summary = await deployer.delete("llm")
    [server] = [c for c in summary.containers if c.name == "server"]
    assert (server.outcome, server.exit_code) == ("killed", 137)
    assert summary.seconds == pytest.approx(5, abs=0.5)


async def test_a_fault_reaches_the_summary_and_the_caller() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(plan())
    driver.engine("llm").fail("remove", "server", refused("remove", "server"))
    with pytest.raises(DrainError, match="remove server: refused"):
        await deployer.delete("llm")


async def test_a_kill_cuts_the_drain_short_and_a_crash_fails_the_wait() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(plan())
    driver.script("llm", "server", drain=20.0)
    seen: list[DrainEvent] = []
    async with deployer.terminate("llm") as drain:
        async for event in drain:
            seen.append(event)
            if type(event).__name__ == "SignalSent":
                drain.kill()
    assert isinstance(seen[-1], DrainFinished)
    assert seen[-1].summary.seconds < 1  # killed at once, not after 20 s
    await deployer.create(plan())
    driver.exit("llm", "server", 3)
    with pytest.raises(CreateError) as caught:
        await deployer.wait_ready("llm", timeout=10)
    assert caught.value.exit_code == 3


async def test_a_changed_plan_replaces_the_workload_and_a_replace_surges() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(plan())
    result = await deployer.create(plan(image="any/image:2"))
    assert result.action == "replaced" and result.strategy == "surge"
    assert result.replaced is not None and result.replaced.workload == "llm"
    instance = result.status.name  # a changed plan is replaced as replace does: a new instance
    assert instance.startswith("llm-") and result.status.labels[LABEL_INSTANCE_OF] == "llm"
    replaced = await deployer.replace(plan(image="any/image:3"), new_name="llm-next")
    assert replaced.strategy == "surge" and replaced.new.name == "llm-next"
    assert [s.workload for s in replaced.drained] == [instance]
    assert [w.name for w in await deployer.list()] == ["llm-next"]


def test_it_imports_no_engine_client() -> None:
    code = (
        "import sys, asyncdeploy.testing\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        "('aiodocker', 'aiohttp', 'kubernetes_asyncio')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_example_tests_a_control_plane_on_it() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "testing.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "-> killed (exit 137); nothing left: True" in done.stdout
    assert "-> exited (exit 0); nothing left: True" in done.stdout


def test_its_public_names_are_its_all() -> None:
    """Issue 32 item 5: what ``dir()`` and ``help()`` show of the package is what it offers
    (not ``annotations``, the name ``from __future__ import annotations`` binds)."""
    from asyncdeploy import testing

    shown = {n for n in vars(testing) if not n.startswith("_")}
    modules = {n for n in shown if type(getattr(testing, n)).__name__ == "module"}
    assert shown - modules == set(testing.__all__)
