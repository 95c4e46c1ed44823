"""One look per delete on the real engines: the deployer's not-found check and the drain's start
are one container list call (two before ``Driver.find``), for one workload and for delete-all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy import Deployer, DrainEvent, DrainFinished, SignalSent, WorkloadNotFound
from tests.engines.helpers import graceful, plan

pytestmark = pytest.mark.anyio


def count_lists(deployer: Deployer, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """From now on, each container list call the driver makes is recorded (its filters)."""
    containers = deployer.driver.session.client.containers  # type: ignore[attr-defined]
    real = containers.list
    calls: list[dict[str, Any]] = []

    async def counted(**kwargs: Any) -> Any:
        calls.append(kwargs.get("filters") or {})
        return await real(**kwargs)

    monkeypatch.setattr(containers, "list", counted)
    return calls


async def test_a_delete_lists_the_containers_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = name("once")
    await deployer.create(plan(workload, [graceful("app", 0, markers)]))
    await deployer.wait_ready(workload, timeout=30)
    lists = count_lists(deployer, monkeypatch)
    async with deployer.terminate(workload) as stream:
        events: list[DrainEvent] = [event async for event in stream]
    assert any(isinstance(e, SignalSent) for e in events)
    assert isinstance(events[-1], DrainFinished) and events[-1].summary.ok
    assert len(lists) == 1, lists


async def test_delete_all_lists_the_containers_once_for_all(
    deployer: Deployer, name: Callable[[str], str], markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = name("group")
    for short in ("a", "b", "c"):
        containers = [graceful("app", 0, markers)]
        await deployer.create(plan(name(short), containers, extra_labels={"group": group}))
    lists = count_lists(deployer, monkeypatch)
    summaries = await deployer.delete_all({"group": group}, grace_period_seconds=0)
    assert len(summaries) == 3 and all(s.ok for s in summaries)
    assert len(lists) == 1, lists


async def test_a_missing_workload_raises_before_any_event_after_one_list(
    deployer: Deployer, name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = count_lists(deployer, monkeypatch)
    missing = name("missing")
    with pytest.raises(WorkloadNotFound, match=missing):
        async with deployer.terminate(missing):
            pytest.fail("the event stream opened for a workload that does not exist")
    # the find's one list, then the name resolution's look for an instance of a replace
    assert len(lists) == 2, lists
