"""``asyncdeploy.fleet`` on fake engines (``asyncdeploy.testing``), on virtual time: one deadline
across engines (a slow engine's drain ends with the others', not its grace later), one merged
stream naming each event's engine, ``kill()`` for all, and a consumer that fails never cuts a
drain short. The real engines together: tests/engines/test_fleet.py."""

from __future__ import annotations

import anyio
import pytest

from asyncdeploy import Container, Deployer, WorkloadPlan
from asyncdeploy._errors import EngineUnavailable
from asyncdeploy._events import ContainerForceKilled, DrainStarted
from asyncdeploy._selectors import Selector
from asyncdeploy.drivers.base import Found
from asyncdeploy.fleet import EngineFailed, Fleet, FleetDrainError, FleetEvent
from asyncdeploy.testing import FakeDriver

pytestmark = pytest.mark.anyio

GRACE = 10


class SlowLook(FakeDriver):
    """An engine whose look takes ``delay`` seconds (a loaded or far-away daemon)."""

    delay = 3.0

    async def find_matching(self, selector: Selector | None) -> Found:
        await anyio.sleep(self.delay)
        return await super().find_matching(selector)


async def fleet_of(*drivers: FakeDriver, stubborn: bool = True) -> Fleet:
    deployers = {}
    for i, driver in enumerate(drivers):
        deployer = Deployer(driver)
        plan = WorkloadPlan(
            name=f"llm{i}",
            labels={"app": "chat"},
            termination_grace_period_seconds=30,
            containers=[Container(name="server", image="any/image:1")],
        )
        await deployer.create(plan)
        driver.script(plan.name, "server", ignores_term=stubborn, drain=2.0)
        deployers[f"engine{i}"] = deployer
    return Fleet(deployers)


async def test_one_deadline_a_slow_engine_included() -> None:
    """The slow engine's drain begins 3 s late, so its own deadline is 3 s later; under one
    deadline what it still runs is killed at the shared one, with the other engine's."""
    fleet = await fleet_of(FakeDriver(), SlowLook())
    started = anyio.current_time()
    killed: dict[str, float] = {}
    graces: dict[str, int] = {}
    async with fleet.terminate_all("app=chat", grace_period_seconds=GRACE) as drain:
        async for item in drain:
            assert isinstance(item, FleetEvent)
            if isinstance(item.event, DrainStarted):
                graces[item.engine] = item.event.grace_period_seconds
            if isinstance(item.event, ContainerForceKilled):
                killed[item.engine] = anyio.current_time() - started
    assert graces == {"engine0": GRACE, "engine1": GRACE}  # given when each drain began
    assert killed == {
        "engine0": pytest.approx(GRACE, abs=0.1),
        "engine1": pytest.approx(GRACE, abs=0.1),
    }
    assert {e: [s.workload for s in d] for e, d in drain.summaries.items()} == {
        "engine0": ["llm0"],
        "engine1": ["llm1"],
    }


async def test_every_event_names_its_engine_and_its_own_workload() -> None:
    fleet = await fleet_of(FakeDriver(), FakeDriver(), FakeDriver(), stubborn=False)
    seen: dict[str, set[str]] = {}
    async with fleet.terminate_all("app=chat") as drain:
        async for item in drain:
            assert isinstance(item, FleetEvent)
            seen.setdefault(item.engine, set()).add(item.event.workload)
    assert seen == {"engine0": {"llm0"}, "engine1": {"llm1"}, "engine2": {"llm2"}}
    assert all(s.ok for d in drain.summaries.values() for s in d)


async def test_kill_cuts_every_engines_drain_short() -> None:
    fleet = await fleet_of(FakeDriver(), SlowLook())
    started = anyio.current_time()
    kills = []
    async with fleet.terminate_all("app=chat", grace_period_seconds=GRACE) as drain:
        drain.kill()  # before the slow engine's drain has even begun
        async for item in drain:
            assert isinstance(item, FleetEvent)
            if isinstance(item.event, ContainerForceKilled):
                kills.append((item.engine, anyio.current_time() - started))
    assert sorted(e for e, _ in kills) == ["engine0", "engine1"]
    assert all(at < SlowLook.delay + 1 for _, at in kills), kills


async def test_a_consumer_that_fails_never_cuts_a_drain_short() -> None:
    """The block raises at the first event: every engine's drain still runs to its end (its
    containers exit on their own), and the consumer's error is what comes out."""
    fleet = await fleet_of(FakeDriver(), FakeDriver(), stubborn=False)
    drain = fleet.terminate_all("app=chat", grace_period_seconds=GRACE)

    async def consume() -> None:
        async with drain:
            async for _ in drain:
                raise RuntimeError("consumer broke")

    with pytest.raises(RuntimeError, match="consumer broke"):
        await consume()
    for engine, deployer in fleet.deployers.items():
        assert await deployer.list("app=chat") == [], engine
    assert {e: len(d) for e, d in drain.summaries.items()} == {"engine0": 1, "engine1": 1}
    outcomes = {c.outcome for d in drain.summaries.values() for s in d for c in s.containers}
    assert "killed" not in outcomes, drain.summaries  # the drains' own ends, not a kill


class GoneEngine(FakeDriver):
    """An engine that stopped answering before its look."""

    async def find_matching(self, selector: Selector | None) -> Found:
        await anyio.sleep(1)
        raise EngineUnavailable("no engine answers", engine="docker")


async def test_an_engine_that_fails_is_said_and_the_others_drain_to_their_end() -> None:
    fleet = await fleet_of(GoneEngine(), FakeDriver(), stubborn=False)
    items: list[FleetEvent | EngineFailed] = []

    async def consume() -> None:
        async with fleet.terminate_all("app=chat", grace_period_seconds=GRACE) as drain:
            async for item in drain:
                items.append(item)

    with pytest.raises(FleetDrainError) as raised:
        await consume()
    assert list(raised.value.failures) == ["engine0"]
    assert isinstance(raised.value.failures["engine0"], EngineUnavailable)
    assert [(i.engine, type(i).__name__) for i in items if isinstance(i, EngineFailed)] == [
        ("engine0", "EngineFailed")
    ]
    finished = [i for i in items if isinstance(i, FleetEvent) and i.engine == "engine1"]
    assert type(finished[-1].event).__name__ == "DrainFinished"
    assert await fleet.deployers["engine1"].list("app=chat") == []
