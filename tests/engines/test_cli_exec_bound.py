"""``exec`` is bounded (issue 16 item 21): its output comes as it is written, a container that
exits mid-command ends it with a clear error (it hung forever on Docker with the shared PID
namespace), and ``--timeout`` bounds a command that does not end. Real CLI, real engines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Container, Deployer
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import graceful, plan, started

pytestmark = pytest.mark.anyio


async def test_an_exec_into_a_container_that_exits_mid_command_ends_with_an_error(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workload = name("execgone")
    await deployer.create(
        plan(workload, [graceful("app", 0, markers)], termination_grace_period_seconds=1)
    )
    await started(markers, "app")
    cli = await start_cli(
        deployer.driver_name, "exec", workload, "--", "sh", "-c", "echo first; sleep 120"
    )
    with anyio.fail_after(30):  # the output comes as it is written, not at the end
        first = await cli.stdout.receive_until(b"\n", 1 << 16)
    assert first == b"first"
    app = await deployer.driver._container_id(workload, "app")  # type: ignore[attr-defined]
    await deployer.driver.session.client.containers.container(app).kill()  # type: ignore[attr-defined]
    code, stderr = await cli.finish(timeout=60)

    # ended by the container's death, not by the command's 120 s (which would exit 0)
    assert code == 1, stderr
    assert "exited before the command ended" in stderr
    assert "Traceback" not in stderr


async def test_exec_timeout_bounds_a_command_that_does_not_end(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    workload = name("exectime")
    await deployer.create(
        plan(
            workload,
            [Container(name="app", image=BUSYBOX, command=["sleep", "600"])],
            termination_grace_period_seconds=0,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(
        deployer.driver_name, "exec", "--timeout", "2s", workload, "--", "sleep", "120"
    )
    code, stderr = await cli.finish(timeout=60)

    # ended by its --timeout, not by the command's 120 s (which would exit 0)
    assert code == 1, stderr
    assert "did not end within 2 s" in stderr
    assert "Traceback" not in stderr
