"""Fault injection: the engine connection drops in the middle of a delete.

The driver talks to the engine through a unix-socket proxy that the test cuts once the drain has
signalled the containers. The first delete reports the failure (it cannot clean up); a second
delete, on a working connection, finishes the job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteStream, TaskStatus

from asyncdeploy import (
    AsyncDeployError,
    Deployer,
    DrainError,
    SignalSent,
    WorkloadNotFound,
    open_deployer,
)
from tests.engines.helpers import graceful, plan, read_markers

pytestmark = pytest.mark.anyio


async def engine_proxy(
    listen: Path, upstream: str, *, task_status: TaskStatus[anyio.CancelScope]
) -> None:
    """Forward connections on ``listen`` to the engine socket until the yielded scope is cancelled."""

    async def pump(source: ByteStream, sink: ByteStream, pair: anyio.CancelScope) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        pair.cancel()

    async def handle(client: ByteStream) -> None:
        async with (
            client,
            await anyio.connect_unix(upstream) as server,
            anyio.create_task_group() as pair,
        ):
            pair.start_soon(pump, client, server, pair.cancel_scope)
            pair.start_soon(pump, server, client, pair.cancel_scope)

    listener = await anyio.create_unix_listener(listen)
    async with listener:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            await listener.serve(handle)


async def test_a_second_delete_finishes_what_a_dropped_connection_left(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("drop")
    await deployer.create(
        plan(workload, [graceful("app", 2, markers)], termination_grace_period_seconds=10)
    )
    await deployer.wait_ready(workload, timeout=30)
    upstream = deployer.driver.url.removeprefix("unix://")  # type: ignore[attr-defined]
    seen: list[str] = []
    async with anyio.create_task_group() as tg:
        proxy = await tg.start(engine_proxy, tmp_path / "engine.sock", upstream)
        async with open_deployer(
            deployer.driver_name, url=f"unix://{tmp_path / 'engine.sock'}"
        ) as flaky:
            with pytest.raises(DrainError) as caught:  # noqa: PT012 - raised as the drain ends
                async with flaky.terminate(workload) as events:
                    async for event in events:
                        seen.append(type(event).__name__)
                        if isinstance(event, SignalSent):
                            proxy.cancel()  # the engine connection drops
        tg.cancel_scope.cancel()
    assert "SignalSent" in seen and seen[-1] == "DrainFinished"
    [summary] = caught.value.summaries
    assert summary.errors, "the failed steps are reported"
    assert all(isinstance(e, str) for e in summary.errors)

    still_there = await deployer.get(workload)
    assert "pause" in {c.name for c in still_there.containers}
    second = await deployer.delete(workload)
    assert second.ok
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)
    assert ("app", "drained-ok") in read_markers(markers)


async def test_unreachable_engine_is_a_clear_error(tmp_path: Path, deployer: Deployer) -> None:
    """A socket nobody listens on gives EngineUnavailable, naming the engine and the address."""
    with pytest.raises(AsyncDeployError, match=f"no {deployer.driver_name} engine answers"):
        async with open_deployer(deployer.driver_name, url=f"unix://{tmp_path / 'none.sock'}"):
            pass
