"""Fault injection: the engine connection drops in the middle of a delete.

The driver talks to the engine through a unix-socket proxy (:mod:`tests.engines.fault_proxy`)
that the test cuts. A blink (every connection cut once, 1 s into a drain) kills nothing: the
lost waits are re-armed and the containers drain to their end. An engine that stays away past
the deadline ends the delete with exit 3, the containers it could not see ``unreachable``; a
second delete once it answers again finishes the job.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from asyncdeploy import (
    AsyncDeployError,
    ContainerForceKilled,
    Deployer,
    DrainEvent,
    DrainFinished,
    SignalSent,
    WorkloadNotFound,
    open_deployer,
)
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import graceful, plan, read_markers

pytestmark = pytest.mark.anyio


def upstream(deployer: Deployer) -> str:
    return deployer.driver.url.removeprefix("unix://")  # type: ignore[attr-defined]


async def test_a_connection_blink_kills_nothing(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """Grace 10, containers that drain 4 s; 1 s into the drain every engine connection is cut
    and new ones are refused for 0.5 s. Nothing is killed; both exit 0 after their drain."""
    workload = name("blink")
    await deployer.create(
        plan(
            workload,
            [graceful("app", 4, markers), graceful("side", 4, markers)],
            termination_grace_period_seconds=10,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    proxy = EngineProxy(tmp_path / "engine.sock", upstream(deployer))
    seen: list[DrainEvent] = []

    async def blink() -> None:
        await anyio.sleep(1.0)
        proxy.down()
        await anyio.sleep(0.5)
        proxy.heal()

    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        async with (
            open_deployer(deployer.driver_name, url=proxy.url) as flaky,
            flaky.terminate(workload) as events,
        ):
            async for event in events:
                seen.append(event)
                if isinstance(event, SignalSent) and event.container == "app":
                    tg.start_soon(blink)
        tg.cancel_scope.cancel()

    assert proxy.cuts == 1
    assert [e for e in seen if isinstance(e, ContainerForceKilled)] == []
    last = seen[-1]
    assert isinstance(last, DrainFinished)
    summary = last.summary
    assert summary.errors == ()
    assert {c.name: (c.outcome, c.exit_code) for c in summary.containers} == {
        "app": ("exited", 0),
        "side": ("exited", 0),
    }
    assert all(c.seconds is not None and c.seconds >= 3.5 for c in summary.containers)
    got = read_markers(markers)
    assert ("app", "drained-ok") in got and ("side", "drained-ok") in got
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)


async def test_an_engine_that_stays_away_is_exit_3_and_a_second_delete_finishes(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """The CLI deletes through the proxy, which goes down at the first signal and stays down
    past the deadline: exit 3, "engine unreachable", the JSON stream still ends with
    DrainFinished and the container is ``unreachable``. Healed, a second delete finishes."""
    workload = name("away")
    await deployer.create(
        plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=3)
    )
    await deployer.wait_ready(workload, timeout=30)
    proxy = EngineProxy(tmp_path / "engine.sock", upstream(deployer))
    env = {**os.environ, "DOCKER_HOST": proxy.url, "CONTAINER_HOST": proxy.url}
    command = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name]
    lines: list[dict[str, object]] = []
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        with anyio.fail_after(60):
            async with await anyio.open_process(
                [*command, "delete", workload, "--output", "json"], env=env
            ) as process:
                assert process.stdout is not None and process.stderr is not None
                pending = ""
                async for chunk in TextReceiveStream(process.stdout):
                    *complete, pending = (pending + chunk).split("\n")
                    for line in complete:
                        lines.append(json.loads(line))
                        if lines[-1]["event"] == "SignalSent":
                            proxy.down()
                error = b"".join([c async for c in process.stderr]).decode()
                await process.wait()
        assert process.returncode == 3, error
        assert "engine unreachable" in error
        assert lines[-1]["event"] == "DrainFinished"
        assert [(c["name"], c["outcome"]) for c in lines[-1]["containers"]] == [  # type: ignore[attr-defined]
            ("app", "unreachable")
        ]
        assert await deployer.get(workload)  # still there: nothing could be removed

        proxy.heal()
        async with open_deployer(deployer.driver_name, url=proxy.url) as healed:
            second = await healed.delete(workload)
        tg.cancel_scope.cancel()
    assert second.ok
    assert [(c.name, c.outcome, c.exit_code) for c in second.containers] == [
        ("app", "already-exited", 0)  # it drained while the engine was away
    ]
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)
    assert ("app", "drained-ok") in read_markers(markers)


async def test_unreachable_engine_is_a_clear_error(tmp_path: Path, deployer: Deployer) -> None:
    """A socket nobody listens on gives EngineUnavailable, naming the engine and the address."""
    with pytest.raises(AsyncDeployError, match=f"no {deployer.driver_name} engine answers"):
        async with open_deployer(deployer.driver_name, url=f"unix://{tmp_path / 'none.sock'}"):
            pass
