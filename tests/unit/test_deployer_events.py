"""The deployer's event stream, against a driver that only drains (no engine): a slow consumer
never delays the drain, and ``kill_now`` cuts the drain short while the events keep flowing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy.deployer import Deployer
from asyncdeploy.drivers.base import Found
from asyncdeploy.events import DrainEvent, DrainFinished, DrainStarted, DrainSummary, Emit

pytestmark = pytest.mark.anyio


@attrs.define
class DrainingDriver:
    """Emits ``events`` DrainStarted events, waits ``hold`` seconds, then finishes; a
    cancellation lands in its finally, as the engine drain's shielded cleanup does."""

    events: int = 3
    hold: float = 0.0
    finished_at: float | None = None
    name: str = "fake"
    calls: list[str] = attrs.field(factory=list)  # every driver call the deployer made

    async def find(self, names: Sequence[str]) -> Found:
        self.calls.append("find")
        return Found(names=tuple(names))

    async def find_matching(self, selector: Any) -> Found:
        self.calls.append("find_matching")
        return Found(names=("a", "b"))

    def __getattr__(self, call: str) -> Any:  # get, list, ...: recorded, then refused
        self.calls.append(call)
        raise AssertionError(f"the deployer called {call}")

    async def drain(
        self, found: Found, *, grace_period_seconds: int | None, emit: Emit
    ) -> list[DrainSummary]:
        self.calls.append("drain")
        assert isinstance(found, Found)
        names = found.names
        summary = DrainSummary(workload=names[0], grace_period_seconds=30, seconds=0, containers=())
        try:
            for _ in range(self.events):
                emit(
                    DrainStarted(
                        workload=names[0],
                        elapsed=0,
                        grace_period_seconds=30,
                        deadline=0,
                        containers=(),
                    )
                )
            await anyio.sleep(self.hold)
        finally:
            emit(DrainFinished(workload=names[0], elapsed=0, summary=summary))
            self.finished_at = anyio.current_time()
        return [summary]


async def test_a_consumer_that_does_not_read_never_delays_the_drain() -> None:
    driver = DrainingDriver(events=1000)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    async with deployer.terminate("w") as events:
        await anyio.sleep(0.2)  # the consumer is busy; the drain has long finished
        assert driver.finished_at is not None
        received: list[DrainEvent] = [event async for event in events]
    assert len(received) == 1001
    assert isinstance(received[-1], DrainFinished)


async def test_kill_now_cuts_the_drain_short_and_the_events_keep_flowing() -> None:
    driver = DrainingDriver(hold=60)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    kill_now = anyio.Event()
    with anyio.fail_after(5):
        async with deployer.terminate("w", kill_now=kill_now) as events:
            received: list[DrainEvent] = []
            async for event in events:
                received.append(event)
                if len(received) == 3:
                    kill_now.set()
    assert isinstance(received[-1], DrainFinished)
    assert len(received) == 4


async def test_a_delete_looks_once_and_drains_what_it_found() -> None:
    """Deployer.delete makes one find (its not-found check) and one drain of what it found;
    delete_all one find_matching for all: no get, no list."""
    driver = DrainingDriver(events=0)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    await deployer.delete("w")
    await deployer.delete_all({"team": "ml"})
    assert driver.calls == ["find", "drain", "find_matching", "drain"]
