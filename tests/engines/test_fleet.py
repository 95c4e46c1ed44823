"""One drain across engines (issue 31 item 4): the local Docker and the remote daemon
(``ci/remote-docker.sh``, TCP + TLS) drained together under one deadline, their events in one
stream, each naming its engine; by the library (``open_fleet``) and by the CLI
(``delete -l SELECTOR --engine docker --engine docker:CONTEXT``).
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncdeploy import open_deployer
from asyncdeploy._events import ContainerExited, ContainerForceKilled, DrainStarted
from asyncdeploy.fleet import EngineFailed, FleetDrain, FleetDrainError, FleetEvent, open_fleet
from tests.engines.conftest import RUN_ID, RUN_LABEL
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import graceful, plan, started
from tests.engines.remote import Remote, docker_context, remote_daemon

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.engine]

LOCAL = "unix:///var/run/docker.sock"
FLEET_LABEL = "asyncdeploy-test-fleet"
GRACE = 4


@pytest.fixture
def remote() -> Remote:
    return remote_daemon()


async def create_on_both(
    remote: Remote, name: Callable[[str], str], markers: Path, *, podman: bool = False
) -> str:
    """A workload on each engine (and on Podman) under one fleet label: one container drains in
    1 s on SIGTERM, the other ignores it (killed at the deadline)."""
    fleet = secrets.token_hex(3)
    engines = [("docker", LOCAL), ("docker", remote.host)] + [("podman", None)] * podman
    for count, (driver, url) in enumerate(engines, start=1):
        async with open_deployer(driver, url=url) as deployer:  # type: ignore[call-overload]
            containers = [graceful("ok", 1, markers), graceful("stubborn", 0, markers, ignore=True)]
            workload = name("fleet")
            await deployer.create(plan(workload, containers, {FLEET_LABEL: fleet}))
            # each shell has set its TERM trap (the stubborn one, drained before that, ended
            # 143 on a loaded clean clone instead of ignoring the signal)
            await started(markers, "ok", "stubborn", times=count, timeout=30)
    return fleet


async def left(url: str, fleet: str) -> list[str]:
    async with open_deployer("docker", url=url) as deployer:
        return [s.name for s in await deployer.list({RUN_LABEL: RUN_ID, FLEET_LABEL: fleet})]


async def clean(url: str) -> None:
    async with open_deployer("docker", url=url) as deployer:
        await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)


@pytest.fixture
async def tls(remote: Remote, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """Docker's TLS variables for the remote daemon (a unix socket ignores them)."""
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", remote.certs)
    yield remote
    with anyio.CancelScope(shield=True):
        for url in (LOCAL, remote.host):
            await clean(url)
        async with open_deployer("podman") as podman:
            await podman.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)


@pytest.mark.podman
async def test_three_engines_drain_under_one_deadline_in_one_stream(
    tls: Remote, name: Callable[[str], str], markers: Path
) -> None:
    """The local Docker, the remote daemon and Podman: one deadline, one stream."""
    fleet = await create_on_both(tls, name, markers, podman=True)
    engines = {
        "here": {"driver": "docker", "url": LOCAL},
        "far": {"driver": "docker", "url": tls.host},
        "pod": {"driver": "podman"},
    }
    items: list[FleetEvent | EngineFailed] = []
    async with open_fleet(engines) as opened:
        assert opened.engines == ("here", "far", "pod")
        drain = opened.terminate_all({FLEET_LABEL: fleet}, grace_period_seconds=GRACE)
        async with drain:
            async for item in drain:
                items.append(item)

    assert not [i for i in items if isinstance(i, EngineFailed)], items
    events = [i for i in items if isinstance(i, FleetEvent)]
    every = ("here", "far", "pod")
    assert {i.engine for i in events} == set(every)
    # each engine's events are its own workload's
    workloads = {e: {i.event.workload for i in events if i.engine == e} for e in every}
    assert all(len(w) == 1 for w in workloads.values()), workloads
    assert len(set.union(*workloads.values())) == 3, workloads
    # one deadline: each drain is given no more than what is left of it when it begins (an
    # engine whose look was slow is killed at the shared deadline: tests/unit/test_fleet.py
    # shows that instant exactly, on virtual time)
    started = {i.engine: i.event for i in events if isinstance(i.event, DrainStarted)}
    assert set(started) == set(every)
    assert all(s.grace_period_seconds <= GRACE for s in started.values()), started
    for engine in every:
        mine = [i.event for i in events if i.engine == engine]
        exited = [e for e in mine if isinstance(e, ContainerExited) and e.container == "ok"]
        assert exited and exited[0].graceful, mine
        killed = [e for e in mine if isinstance(e, ContainerForceKilled)]
        assert [e.container for e in killed] == ["stubborn"], mine
    assert {e: len(s) for e, s in drain.summaries.items()} == {"here": 1, "far": 1, "pod": 1}
    assert await left(LOCAL, fleet) == [] and await left(tls.host, fleet) == []
    async with open_deployer("podman") as podman:
        assert await podman.list({RUN_LABEL: RUN_ID, FLEET_LABEL: fleet}) == []


async def read(
    drain: FleetDrain, items: list[FleetEvent | EngineFailed], proxy: EngineProxy
) -> None:
    """Every item of ``drain``; the proxy goes down once the flaky engine's drain has begun."""
    async with drain:
        async for item in drain:
            items.append(item)
            began = isinstance(item, FleetEvent) and isinstance(item.event, DrainStarted)
            if began and item.engine == "flaky":
                proxy.down()


async def test_an_engine_that_goes_away_does_not_stop_the_others(
    tls: Remote, name: Callable[[str], str], markers: Path, tmp_path: Path
) -> None:
    """The local engine, reached through a proxy that goes down once its drain has begun: its
    drain ends unreachable, said in the stream and on exit, while the remote one drains to its
    end, under the same deadline."""
    fleet = await create_on_both(tls, name, markers)
    proxy = EngineProxy(tmp_path / "engine.sock", LOCAL.removeprefix("unix://"))
    engines = {
        "flaky": {"driver": "docker", "url": proxy.url},
        "far": {"driver": "docker", "url": tls.host},
    }
    items: list[FleetEvent | EngineFailed] = []
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        async with open_fleet(engines) as opened:
            drain = opened.terminate_all({FLEET_LABEL: fleet}, grace_period_seconds=GRACE)
            with pytest.raises(FleetDrainError) as raised:
                await read(drain, items, proxy)
        proxy.heal()
        tg.cancel_scope.cancel()
    assert list(raised.value.failures) == ["flaky"], raised.value
    assert [i.engine for i in items if isinstance(i, EngineFailed)] == ["flaky"]
    [far] = drain.summaries["far"]
    assert far.ok and far.count("killed") == 1, far  # the stubborn one, at the deadline
    assert await left(tls.host, fleet) == []


async def test_the_cli_deletes_on_several_engines_in_one_command(
    remote: Remote,
    name: Callable[[str], str],
    markers: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``delete -l SELECTOR --engine docker --engine docker:far``, the second a docker context
    made by the docker CLI: one JSON object per event, each naming its engine; both gone."""
    _, env = await docker_context(remote, tmp_path)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")  # for this process's own looks
    monkeypatch.setenv("DOCKER_CERT_PATH", remote.certs)
    fleet = await create_on_both(remote, name, markers)
    try:
        selector = f"{RUN_LABEL}={RUN_ID},{FLEET_LABEL}={fleet}"
        args = ["delete", "-l", selector, "--engine", "docker", "--engine", "docker:far"]
        done = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "asyncdeploy",
                *args,
                "--grace-period-seconds",
                "3",
                "-o",
                "json",
            ],
            env=env,
            check=False,
        )
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        lines = [json.loads(line) for line in out.splitlines()]
        assert {line["engine"] for line in lines} == {"docker", "docker:far"}, lines
        finished = [line for line in lines if line.get("event") == "DrainFinished"]
        assert sorted(line["engine"] for line in finished) == ["docker", "docker:far"]
        assert await left(LOCAL, fleet) == []
        assert await left(remote.host, fleet) == []
    finally:
        with anyio.CancelScope(shield=True):
            for url in (LOCAL, remote.host):
                await clean(url)
