"""The second signal kills what runs at any moment after the first (issue 16 item 7, the CLI
side): here both come while the CLI is still connecting (the engine's socket holds every
connection), before any container's drain exists. Once the engine answers, the delete kills at
once (grace 0) instead of draining to a 30 s deadline or killing nothing, and says so truly.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncdeploy import Deployer, WorkloadNotFound
from tests.engines.cli_process import CLIProcess
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import graceful, plan
from tests.polling import until

pytestmark = pytest.mark.anyio


async def test_two_signals_while_connecting_kill_at_once_once_the_engine_answers(
    deployer: Deployer, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    workload = name("early")
    await deployer.create(
        plan(
            workload,
            [graceful("ignorer", 0, markers, ignore=True)],
            termination_grace_period_seconds=30,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    upstream = deployer.driver.url.removeprefix("unix://")  # type: ignore[attr-defined]
    proxy = EngineProxy(tmp_path / "engine.sock", upstream)
    env = {**os.environ, "DOCKER_HOST": proxy.url, "CONTAINER_HOST": proxy.url}
    command = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name]
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        proxy.hold()  # the CLI's first call (its ping) gets no answer yet
        process = await anyio.open_process(
            [*command, "delete", workload, "-o", "json"], env=env, start_new_session=True
        )
        assert process.stdout is not None
        cli = CLIProcess(process, BufferedByteReceiveStream(process.stdout))
        # its first call reached the engine's socket: its signal receiver is installed
        await until(lambda: proxy.accepted > 0, timeout=30, interval=0.05)
        await anyio.sleep(0.3)
        cli.send(signal.SIGINT)
        await anyio.sleep(0.2)
        cli.send(signal.SIGINT)
        await anyio.sleep(0.5)
        proxy.release()
        code, stderr = await cli.finish(timeout=60)
        tg.cancel_scope.cancel()

    assert code == 130, stderr
    assert "killing the remaining containers now" in stderr
    assert "Traceback" not in stderr
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished"
    # killed at once, not at the 30 s deadline: killed before its drain began, the drain ran
    # with grace 0 (and says so), sending no SIGTERM
    assert last["grace_period_seconds"] == 0, last
    assert not [line for line in cli.lines if line.get("event") == "SignalSent"], cli.lines
    assert [(c["name"], c["outcome"]) for c in last["containers"]] == [("ignorer", "killed")]
    with pytest.raises(WorkloadNotFound):  # really gone, as the CLI says
        await deployer.get(workload)
