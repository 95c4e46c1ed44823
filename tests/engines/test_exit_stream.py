"""The exit stream: exits (with their codes) as the engine announces them, and its fallback."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer
from asyncdeploy.drivers.base import LABEL_WORKLOAD
from asyncdeploy.drivers.engine._exits import ExitStreamLost, die_event_exit, watch_exits
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.fault_proxy import EngineProxy

pytestmark = pytest.mark.anyio

EXITS_WITH = "trap 'exit {code}' TERM; while true; do sleep 0.1; done"


async def start(deployer: Deployer, code: int) -> str:
    """A labelled container that exits with ``code`` on SIGTERM; its id."""
    client = deployer.driver._client  # type: ignore[attr-defined]
    container = await client.containers.create(
        {
            "Image": BUSYBOX,
            "Cmd": ["sh", "-c", EXITS_WITH.format(code=code)],
            "Labels": {LABEL_WORKLOAD: f"t{RUN_ID}-exits", RUN_LABEL: RUN_ID},
        },
        name=f"t{RUN_ID}-exits-{secrets.token_hex(3)}",
    )
    await container.start()
    return str(container.id)


async def remove(deployer: Deployer, idents: list[str]) -> None:
    client = deployer.driver._client  # type: ignore[attr-defined]
    with anyio.CancelScope(shield=True):
        for ident in idents:
            await client.containers.container(ident).delete(force=True)


async def test_every_exit_and_its_code_arrives_on_the_stream(deployer: Deployer) -> None:
    idents = [await start(deployer, code) for code in (0, 3, 7)]
    try:
        async with watch_exits(deployer.driver.url) as watch:  # type: ignore[attr-defined]
            for ident in idents:
                await deployer.driver._kill(ident, "SIGTERM")  # type: ignore[attr-defined]
            with anyio.fail_after(20):
                codes = [await watch.wait_exit(ident) for ident in idents]
        assert codes == [0, 3, 7]
    finally:
        await remove(deployer, idents)


async def test_a_cut_stream_sends_the_waiters_to_the_fallback(
    deployer: Deployer, tmp_path: Path
) -> None:
    """When the connection carrying the stream drops, a waiter is told at once (it then asks the
    engine with wait) instead of hanging until the deadline."""
    ident = await start(deployer, 0)
    upstream = deployer.driver.url.removeprefix("unix://")  # type: ignore[attr-defined]
    try:
        async with anyio.create_task_group() as tg:
            proxy = EngineProxy(tmp_path / "engine.sock", upstream)
            await tg.start(proxy.serve)
            async with watch_exits(proxy.url) as watch:
                proxy.cut()
                with anyio.fail_after(10), pytest.raises(ExitStreamLost):
                    await watch.wait_exit(ident)
            tg.cancel_scope.cancel()
    finally:
        await remove(deployer, [ident])


def test_die_events_of_both_engines_parse() -> None:
    """Docker reports ``exitCode``, Podman's compatible stream ``containerExitCode``."""
    ours = {LABEL_WORKLOAD: "w"}
    docker = {
        "status": "die",
        "id": "abc",
        "Actor": {"ID": "abc", "Attributes": {**ours, "exitCode": "137"}},
    }
    podman = {
        "Action": "die",
        "Actor": {"ID": "def", "Attributes": {**ours, "containerExitCode": "0"}},
    }
    assert die_event_exit(docker) == ("abc", 137)
    assert die_event_exit(podman) == ("def", 0)
    assert die_event_exit({"Action": "start", "id": "abc", "Actor": {"Attributes": ours}}) is None
    someone_elses = {"Action": "die", "Actor": {"ID": "x", "Attributes": {"exitCode": "0"}}}
    assert die_event_exit(someone_elses) is None
