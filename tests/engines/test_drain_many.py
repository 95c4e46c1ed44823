"""Many drains at once (issue 25 item 1): forty deletes through one deployer, and eight deleters
in separate processes, each container exiting 1 s after its SIGTERM under a grace of 5 s. Every
SIGTERM goes out at once, whatever else the drains do, and every container exits by itself."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer
from asyncdeploy.events import (
    ContainerForceKilled,
    DrainEvent,
    DrainFinished,
    SignalSent,
)
from tests.engines.cli_process import start_cli
from tests.engines.helpers import graceful, plan, read_markers, started

pytestmark = pytest.mark.anyio

WORKLOADS = 40
GRACE = 5
SIGNAL_WITHIN = 1.0  # seconds from a drain's start to its SignalSent


async def create_many(deployer: Deployer, names: list[str], markers: Path, **labels: str) -> None:
    """One app per workload that exits 1 s after SIGTERM (not timed: four creates at a time)."""
    limiter = anyio.CapacityLimiter(4)

    async def one(i: int, workload: str) -> None:
        async with limiter:
            app = graceful(f"app{i:02d}", 1, markers)
            await deployer.create(
                plan(workload, [app], extra_labels=labels, termination_grace_period_seconds=GRACE)
            )

    async with anyio.create_task_group() as tg:
        for i, workload in enumerate(names):
            tg.start_soon(one, i, workload)
    await started(markers, *(f"app{i:02d}" for i in range(len(names))), timeout=60)


def each_drained_once(markers: Path, count: int) -> None:
    marks = Counter(read_markers(markers))
    for i in range(count):
        app = f"app{i:02d}"
        assert marks[(app, "got-TERM")] == 1, (app, marks)
        assert marks[(app, "drained-ok")] == 1, (app, marks)


async def test_forty_deletes_at_once_signal_every_container_at_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """40 concurrent ``terminate()`` through one deployer: each SIGTERM goes out within 1 s of
    its drain's start and each container exits 0 by itself, none killed. (On the code that
    wrote a claim record into every pause container before its signal and rewrote it every
    second, the signals went out 1.7-4.9 s in and a third of the containers were SIGKILLed.)"""
    names = [name(f"many{i:02d}") for i in range(WORKLOADS)]
    await create_many(deployer, names, markers)
    seen: dict[str, list[DrainEvent]] = {}

    async def delete(workload: str) -> None:
        async with deployer.terminate(workload) as stream:
            seen[workload] = [event async for event in stream]

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for workload in names:
                tg.start_soon(delete, workload)
    late = {}
    for workload, events in seen.items():
        [sent] = [e for e in events if isinstance(e, SignalSent)]
        if sent.elapsed > SIGNAL_WITHIN:
            late[workload] = round(sent.elapsed, 2)
        assert not [e for e in events if isinstance(e, ContainerForceKilled)], events
        [finished] = [e for e in events if isinstance(e, DrainFinished)]
        [app] = finished.summary.containers
        assert (app.outcome, app.exit_code) == ("exited", 0), finished.summary
        assert finished.summary.errors == (), finished.summary
    assert late == {}, f"SignalSent later than {SIGNAL_WITHIN} s into the drain: {late}"
    each_drained_once(markers, WORKLOADS)


async def test_eight_deleters_in_separate_processes_drain_each_workload_once(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """Eight ``delete-all`` processes at once over the same 40 workloads: one drains each
    workload (its SIGTERM within 1 s of its drain's start), the others follow it; every
    container gets one SIGTERM and exits 0 by itself; every process succeeds."""
    batch = name("batch")
    names = [name(f"deleters{i:02d}") for i in range(WORKLOADS)]
    await create_many(deployer, names, markers, batch=batch)
    processes = [
        await start_cli(
            deployer.driver_name, "delete-all", "-l", f"batch={batch}", "--output", "json"
        )
        for _ in range(8)
    ]
    results = []
    async with anyio.create_task_group() as tg:

        async def finish(index: int) -> None:
            code, stderr = await processes[index].finish(timeout=120)
            results.append((code, stderr, processes[index].lines))

        for index in range(len(processes)):
            tg.start_soon(finish, index)
    signalled: Counter[str] = Counter()
    for code, stderr, lines in results:
        assert code == 0, (code, stderr)
        for line in lines:
            if line["event"] == "SignalSent":  # its elapsed: from its drain's start
                signalled[line["workload"]] += 1
                assert line["elapsed"] <= SIGNAL_WITHIN, line
            if line["event"] == "DrainFinished":
                for container in line["summary"]["containers"]:
                    outcome = (container["outcome"], container["exit_code"])
                    assert outcome in (("exited", 0), ("missing", None)), json.dumps(line)
                assert line["summary"]["errors"] == [], json.dumps(line)
            assert line["event"] != ContainerForceKilled.__name__, json.dumps(line)
    assert signalled == Counter(dict.fromkeys(names, 1)), signalled
    each_drained_once(markers, WORKLOADS)
