"""The exit stream: exits (with their codes) as the engine announces them, and its fallback."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import aiodocker
import anyio
import pytest
from anyio.abc import TaskStatus

from asyncdeploy import ContainerExited, Deployer
from asyncdeploy.drivers.engine._exits import ExitStreamLost, die_event_exit, watch_exits
from asyncdeploy.drivers.engine._spec import container_name
from asyncdeploy.labels import LABEL_WORKLOAD
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import graceful, plan

pytestmark = pytest.mark.anyio

EXITS_WITH = "trap 'exit {code}' TERM; while true; do sleep 0.1; done"


async def start(deployer: Deployer, code: int) -> str:
    """A labelled container that exits with ``code`` on SIGTERM; its id."""
    client = deployer.driver.session.client  # type: ignore[attr-defined]
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
    client = deployer.driver.session.client  # type: ignore[attr-defined]
    with anyio.CancelScope(shield=True):
        for ident in idents:
            await client.containers.container(ident).delete(force=True)


async def test_every_exit_and_its_code_arrives_on_the_stream(deployer: Deployer) -> None:
    idents = [await start(deployer, code) for code in (0, 3, 7)]
    try:
        async with watch_exits(deployer.driver.url) as watch:  # type: ignore[attr-defined]
            await watch.settled()  # it yields at once: the drain does not wait for the opening
            for ident in idents:
                await deployer.driver.session.kill(ident, "SIGTERM")  # type: ignore[attr-defined]
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
                proxy.down()
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


async def engine_die_times(
    url: str,
    names: set[str],
    died: dict[str, int],
    all_died: anyio.Event,
    *,
    task_status: TaskStatus[None],
) -> None:
    """The engine's own ``die`` time (ns) of each container in ``names``, from its event stream
    (as the benchmark's EventLog reads it), on a connection of its own."""
    client = aiodocker.Docker(url=url)
    try:
        params = {"filters": json.dumps({"type": ["container"]})}
        async with client._query("events", method="GET", params=params, timeout=None) as answer:
            task_status.started()
            async for line in answer.content:
                raw = json.loads(line) if line.strip() else {}
                name = str(((raw.get("Actor") or {}).get("Attributes") or {}).get("name", ""))
                if (raw.get("Action") or raw.get("status")) == "die" and name in names:
                    died[name] = int(raw.get("timeNano") or int(raw["time"]) * 1_000_000_000)
                    if set(died) == names:
                        all_died.set()
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()


async def test_a_drained_containers_exit_reaches_the_consumer_from_the_engines_die_event(
    deployer: Deployer, name: Callable[[str], str], markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight containers that drain 0.5 s: each ``ContainerExited`` is heard from the engine's
    ``die`` event, after it, with no ``wait`` call. Podman's wait answers only after its cleanup
    (0.4-1.6 s later, measured); the drain's exit stream hears the die event itself. How soon
    after the die event is the benchmark's figure ("event latency", ``nox -s bench``): a bound
    in seconds here failed by the machine's load, not by the product."""
    workload = name("latency")
    containers = [f"c{i}" for i in range(8)]
    await deployer.create(
        plan(
            workload,
            [graceful(c, 0.5, markers) for c in containers],
            termination_grace_period_seconds=10,
        )
    )
    await deployer.wait_ready(workload, timeout=60)
    engine_names = {container_name(workload, c): c for c in containers}
    died: dict[str, int] = {}
    all_died = anyio.Event()
    exited: dict[str, int] = {}
    session = type(deployer.driver.ops.session)  # type: ignore[attr-defined]
    engine_wait = session.wait
    waited: list[str] = []

    async def wait(self: object, ident: str, *args: object, **kwargs: object) -> object:
        waited.append(ident)
        return await engine_wait(self, ident, *args, **kwargs)

    monkeypatch.setattr(session, "wait", wait)  # (a slotted class: on the class, for this test)
    async with anyio.create_task_group() as tg:
        url = deployer.driver.url  # type: ignore[attr-defined]
        await tg.start(engine_die_times, url, set(engine_names), died, all_died)
        async with deployer.terminate(workload) as events:
            async for event in events:
                if isinstance(event, ContainerExited):
                    exited[event.container] = time.time_ns()
        with anyio.fail_after(10):
            await all_died.wait()
        tg.cancel_scope.cancel()
    monkeypatch.undo()
    assert set(died) == set(engine_names) and set(exited) == set(containers)
    assert waited == [], "an exit was asked for with a wait, not heard from the stream"
    for engine_name, died_at in died.items():  # the same host's clock: the engine's, then ours
        assert exited[engine_names[engine_name]] >= died_at, (engine_name, died_at, exited)


async def test_opening_the_stream_does_not_delay_the_drain(deployer: Deployer) -> None:
    """The watch reuses the API version the driver learnt: asking Podman's slow ``/version``
    again cost 0.3 s before every drain's first signal (measured: 1 ms each without it), so
    the watch's client is given the version, never ``auto`` (which asks ``/version``)."""
    ops = deployer.driver.ops  # type: ignore[attr-defined]
    for _ in range(3):
        async with ops.exits() as watch:
            assert not watch.lost
    learnt = ops.session.client.api_version
    assert learnt != "auto" and ops.hub.api_version == learnt


async def test_the_stream_is_closed_with_the_watch(deployer: Deployer) -> None:
    """aiodocker's ``_query`` leaves the response to its caller: the stream's response was
    never closed ("Unclosed connection" warnings after every drain)."""
    import gc
    import warnings

    gc.collect()  # what earlier tests left for the collector is not this stream's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            async with watch_exits(deployer.driver.url) as watch:  # type: ignore[attr-defined]
                await watch.settled()
                assert not watch.lost
        gc.collect()
    unclosed = [str(w.message) for w in caught if "Unclosed" in str(w.message)]
    assert unclosed == []
