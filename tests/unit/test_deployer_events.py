"""The deployer's event stream, against a driver that only drains (no engine): a slow consumer
never delays the drain, and the handle's ``kill()`` cuts the drain short while the events keep
flowing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy._errors import DrainError, DrainUnreachable
from asyncdeploy._events import DrainEvent, DrainFinished, DrainStarted, DrainSummary, Emit
from asyncdeploy.deployer import Deployer
from asyncdeploy.drivers.base import Found
from asyncdeploy.plan import Container, WorkloadPlan
from asyncdeploy.testing import FakeDriver, refused

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


async def test_kill_cuts_the_drain_short_and_the_events_keep_flowing() -> None:
    driver = DrainingDriver(hold=60)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with deployer.terminate("w") as drain:
            received: list[DrainEvent] = []
            async for event in drain:
                received.append(event)
                if len(received) == 3:
                    drain.kill()
    assert isinstance(received[-1], DrainFinished)
    assert len(received) == 4
    assert drain.killed and [s.workload for s in drain.summaries] == ["w"]


async def test_a_delete_looks_once_and_drains_what_it_found() -> None:
    """Deployer.delete makes one find (its not-found check) and one drain of what it found;
    delete_all one find_matching for all: no get, no list."""
    driver = DrainingDriver(events=0)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    await deployer.delete("w")
    await deployer.delete_all({"team": "ml"})
    assert driver.calls == ["find", "drain", "find_matching", "drain"]


async def test_a_consumer_that_raises_never_cuts_the_drain_short() -> None:
    """A consumer error (a closed pipe, a renderer bug) is raised after the drain has run to
    its end: the drain is not cancelled, so its shielded cleanup never kills (issue 16 1(c))."""
    driver = DrainingDriver(hold=0.5)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    started = anyio.current_time()

    async def consume() -> None:
        async with deployer.terminate("w") as events:
            async for _ in events:
                raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        await consume()
    assert driver.finished_at is not None
    assert driver.finished_at - started >= 0.45  # it held its whole 0.5 s, not cut at the error


async def test_a_cancelled_consumer_still_cancels_the_drain() -> None:
    """Cancellation keeps its documented meaning: the drain is cut short (its cleanup runs)."""
    driver = DrainingDriver(hold=60)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    with anyio.move_on_after(0.3):
        async with deployer.terminate("w") as events:
            async for _ in events:
                pass
    assert driver.finished_at is not None


@attrs.define
class RecordingGrace(DrainingDriver):
    graces: list[int | None] = attrs.field(factory=list)

    async def drain(
        self, found: Found, *, grace_period_seconds: int | None, emit: Emit
    ) -> list[DrainSummary]:
        self.graces.append(grace_period_seconds)
        return await super().drain(found, grace_period_seconds=grace_period_seconds, emit=emit)


async def test_a_kill_before_the_drain_begins_drains_at_grace_zero() -> None:
    """The second Ctrl-C during the connect or the look: no container's drain exists yet to be
    cut short, so the drain itself runs at grace 0 (issue 16 item 7). The handle exists before
    it is entered, so the kill can come first."""
    driver = RecordingGrace(events=0)
    deployer = Deployer(driver)  # type: ignore[arg-type]
    drain = deployer.terminate("w", grace_period_seconds=30)
    drain.kill()
    async with drain:
        [event async for event in drain]
    assert driver.graces == [0]


@attrs.define
class FailingAfterKill(DrainingDriver):
    """A drain whose cleanup, cut short by a kill, could not remove a container."""

    async def drain(
        self, found: Found, *, grace_period_seconds: int | None, emit: Emit
    ) -> list[DrainSummary]:
        summary = DrainSummary(
            workload="w",
            grace_period_seconds=30,
            seconds=1,
            containers=(),
            errors=("remove app: refused",),
        )
        emit(
            DrainStarted(
                workload="w", elapsed=0, grace_period_seconds=30, deadline=0, containers=()
            )
        )
        try:
            await anyio.sleep(60)
        finally:
            emit(DrainFinished(workload="w", elapsed=1, summary=summary))
        return [summary]


async def test_a_drain_cut_short_by_a_kill_reports_what_it_left() -> None:
    """After a kill the drain returns nothing (it was cancelled): its errors are read from its
    DrainFinished event, never reported as a success (issue 16 item 7)."""
    deployer = Deployer(FailingAfterKill())  # type: ignore[arg-type]

    async def consume() -> None:
        async with deployer.terminate("w") as drain:
            async for _ in drain:
                drain.kill()  # once the drain has begun

    with pytest.raises(DrainError, match="remove app: refused"), anyio.fail_after(5):
        await consume()


# --- one owner for each verdict: the handle (issue 33 item 2) ---------------------------------


async def test_a_block_left_early_still_has_every_summary_and_its_verdict() -> None:
    """The handle records each DrainFinished as the drain emits it, not as the consumer reads
    it: a block left after the first event still ends with both workloads' summaries, and the
    failed one's DrainError (decided by the handle, from what it recorded)."""
    driver = FakeDriver()
    deployer = Deployer(driver)
    for name in ("a", "b"):
        await deployer.create(_plan(name))
    driver.engine("b").fail("remove", "server", refused("remove", "server"))
    drain = deployer.terminate_many(["a", "b"])

    async def leave_early() -> None:
        async with drain:
            async for _ in drain:
                break  # the rest of the events are never read

    with pytest.raises(DrainError, match=r"b: remove server: .*refused") as raised:
        await leave_early()
    assert sorted(s.workload for s in drain.summaries) == ["a", "b"]
    assert [s.workload for s in raised.value.summaries] == ["b"]


async def test_the_engine_gone_is_the_handles_verdict_with_every_summary() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(_plan("a"))
    driver.engine("a").down = True
    drain = deployer.terminate("a")

    async def read_all() -> None:
        async with drain:
            async for _ in drain:
                pass

    with pytest.raises(DrainUnreachable) as raised:
        await read_all()
    assert [s.workload for s in drain.summaries] == ["a"]
    assert [s.workload for s in raised.value.summaries] == ["a"]


async def test_stop_is_the_one_verb_a_create_stops_by() -> None:
    """``stop()`` before the create is entered: it stops before making anything, its events
    end, and it says it was stopped; ``stop(kill=True)`` only kills drains."""
    driver = FakeDriver()
    deployer = Deployer(driver)
    creation = deployer.creating(_plan("a"))
    creation.stop()
    async with creation:
        events = [event async for event in creation]
    assert (events, creation.stopped, creation.killed) == ([], True, False)
    assert await deployer.list() == []
    # kill=True cuts drains short and stops nothing else: the create still makes the workload
    # (a create whose old workload's drain a second signal killed serves the new one)
    killed = deployer.creating(_plan("a"))
    killed.stop(kill=True)
    async with killed:
        _ = [event async for event in killed]
    assert (killed.stopped, killed.killed, killed.result.action) == (False, True, "created")


async def test_a_replacements_summaries_are_its_old_ones_drains() -> None:
    """The replacement's summaries come from the old ones' drain handle (one record each)."""
    driver = FakeDriver()
    deployer = Deployer(driver)
    await deployer.create(_plan("a"))
    changed = attrs.evolve(_plan("a"), labels={"team": "ml", "v": "2"})
    async with deployer.replacing(changed, strategy="surge") as replacement:
        finished = [e async for e in replacement if isinstance(e, DrainFinished)]
    assert [s.workload for s in replacement.summaries] == ["a"]
    assert [e.summary for e in finished] == list(replacement.summaries)


def _plan(name: str) -> WorkloadPlan:
    return WorkloadPlan(
        name=name,
        termination_grace_period_seconds=30,
        labels={"team": "ml"},
        containers=[Container(name="server", image="any/image:1")],
    )
