"""An engine that takes the calls and never answers (issue 25 item 2): a deadlocked daemon.

The CLI talks to the engine through the fault proxy (:mod:`tests.engines.fault_proxy`), which
freezes mid-operation: it keeps accepting connections and forwards nothing more, either way.
A delete, a create and a replacement each end with exit 3 ("engine unreachable") within their
bound (``ASYNCDEPLOY_ENGINE_TIMEOUT``, set short here) instead of hanging; once the proxy lets
the engine answer again, everything is cleaned up. (Docker 20.10 was seen deadlocked after 40
concurrent deletes; a ``replace`` then waited over 20 minutes.)
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from asyncdeploy import Deployer
from asyncdeploy.drivers.engine._claim import claim_volume
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_WORKLOAD
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import graceful, plan, plan_file
from tests.engines.test_gate import free_port, order, require_images, stock_plan
from tests.polling import until

pytestmark = pytest.mark.anyio

ANSWER = 3  # seconds the engine may take to answer one call, here


def upstream(deployer: Deployer) -> str:
    return deployer.driver.url.removeprefix("unix://")  # type: ignore[attr-defined]


async def through_frozen_proxy(
    deployer: Deployer,
    proxy: EngineProxy,
    args: list[str],
    freeze_when: Callable[[dict[str, Any]], bool] | None = None,
    freeze_after: Callable[[], Awaitable[None]] | None = None,
) -> tuple[int, str, list[dict[str, Any]], float]:
    """Run the CLI through the proxy; freeze it when a JSON line matches (or once
    ``freeze_after`` returns); return the exit code, stderr, the JSON lines and the seconds
    from the freeze to the exit."""
    env = {
        **os.environ,
        "DOCKER_HOST": proxy.url,
        "CONTAINER_HOST": proxy.url,
        "ASYNCDEPLOY_ENGINE_TIMEOUT": str(ANSWER),
    }
    command = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name, *args]
    lines: list[dict[str, Any]] = []
    frozen: list[float] = []

    def freeze() -> None:
        if not frozen:
            frozen.append(time.monotonic())
            proxy.freeze()

    async with anyio.create_task_group() as tg, await anyio.open_process(command, env=env) as cli:
        assert cli.stdout is not None and cli.stderr is not None
        if freeze_after is not None:

            async def later() -> None:
                await freeze_after()
                freeze()

            tg.start_soon(later)
        pending = ""
        try:
            with anyio.fail_after(120):  # the code before this change waited for ever
                async for chunk in TextReceiveStream(cli.stdout):
                    *complete, pending = (pending + chunk).split("\n")
                    for line in complete:
                        if line.startswith("{"):
                            lines.append(json.loads(line))
                            if freeze_when is not None and freeze_when(lines[-1]):
                                freeze()
                error = b"".join([c async for c in cli.stderr]).decode()
                code = await cli.wait()
        finally:
            if cli.returncode is None:
                cli.kill()  # a CLI that hangs fails the test, and is not left behind
        tg.cancel_scope.cancel()
    assert frozen, (code, error, lines)
    return code, error, lines, time.monotonic() - frozen[0]


@pytest.fixture
async def proxy(deployer: Deployer, tmp_path: Path) -> Any:
    frozen = EngineProxy(tmp_path / "engine.sock", upstream(deployer))
    async with anyio.create_task_group() as tg:
        await tg.start(frozen.serve)
        yield frozen
        frozen.release()  # what was held answers now: the fixture's clean-up can run
        tg.cancel_scope.cancel()


async def delete_while_held(
    proxy: EngineProxy, command: list[str], env: dict[str, str], workload: str, held: float
) -> Any:
    """``delete WORKLOAD --output json`` through the proxy, each call ``proxy.slow`` names held
    ``held`` seconds from the first one held; the finished process."""

    async def release_later() -> None:
        await proxy.held.wait()
        await anyio.sleep(held)
        proxy.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_later)
        with anyio.fail_after(120):
            done = await anyio.run_process(
                [*command, "delete", workload, "--output", "json"], env=env, check=False
            )
        tg.cancel_scope.cancel()
    return done


async def test_a_delete_whose_engine_stops_answering_is_exit_3(
    deployer: Deployer, proxy: EngineProxy, name: Callable[[str], str], markers: Path
) -> None:
    """Frozen at the first SIGTERM, grace 3: the drain's calls get its deadline plus the
    answer bound, then the delete ends with exit 3 and the JSON stream with DrainFinished."""
    workload = name("frozen")
    await deployer.create(
        plan(workload, [graceful("app", 60, markers)], termination_grace_period_seconds=3)
    )
    await deployer.wait_ready(workload, timeout=30)
    code, error, lines, after = await through_frozen_proxy(
        deployer,
        proxy,
        ["delete", workload, "--output", "json"],
        freeze_when=lambda line: line["event"] == "SignalSent",
    )
    assert code == 3, error
    assert "engine unreachable" in error
    assert lines[-1]["event"] == "DrainFinished"
    assert [c["outcome"] for c in lines[-1]["containers"]] == ["unreachable"]
    assert after < 3 + 3 * ANSWER + 30, after  # deadline, its margin, the cleanup's bounds


async def test_a_removal_answered_past_the_deadlines_margin_is_no_failure(
    deployer: Deployer, proxy: EngineProxy, name: Callable[[str], str], markers: Path
) -> None:
    """A loaded engine's removals queue behind one another (Podman, forty workloads on two
    loaded cores: over 30 s; CI's eight deleters once failed so, every container ended). Here
    every removal is answered only well past the deadline plus the answer bound (within the
    clean-up's own bound), every other call as usual: the delete succeeds, the app exited by
    itself (before: "engine unreachable", exit 3)."""
    workload = name("slowremove")
    await deployer.create(
        plan(workload, [graceful("app", 1, markers)], termination_grace_period_seconds=3)
    )
    await deployer.wait_ready(workload, timeout=30)
    held = 3 + 2 * ANSWER + 2  # past the deadline's margin, and the session's answer bound
    env = {**os.environ, "DOCKER_HOST": proxy.url, "CONTAINER_HOST": proxy.url}
    env["ASYNCDEPLOY_ENGINE_TIMEOUT"] = str(ANSWER)
    command = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name]
    proxy.slow("DELETE")

    done = await delete_while_held(proxy, command, env, workload, held)
    error = done.stderr.decode()
    assert done.returncode == 0, error
    assert proxy.held.is_set()
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line]
    finished = lines[-1]
    assert finished["event"] == "DrainFinished" and finished["errors"] == [], finished
    outcomes = [(c["outcome"], c["exit_code"]) for c in finished["containers"]]
    assert outcomes == [("exited", 0)], finished
    removed = next(line["elapsed"] for line in lines if line["event"] == "ContainerRemoved")
    assert removed > held, lines  # the engine did hold it
    assert not await deployer.driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]


async def test_a_create_whose_engine_stops_answering_is_exit_3(
    deployer: Deployer,
    proxy: EngineProxy,
    name: Callable[[str], str],
    markers: Path,
    tmp_path: Path,
) -> None:
    """Frozen once the pause container exists: the create's next call is not answered within
    the bound, and the create ends with exit 3 instead of waiting for ever."""
    workload = name("frozencreate")
    path = plan_file(
        tmp_path,
        workload,
        [{"name": "app", "image": "asyncdeploy-test/busybox:latest", "command": ["sleep", "600"]}],
    )
    session = deployer.driver.session  # type: ignore[attr-defined]

    async def pause_made() -> None:
        async def made() -> bool:
            return bool(await session.containers({LABEL_WORKLOAD: workload}))

        await until(made, timeout=60, interval=0.02)

    code, error, _, after = await through_frozen_proxy(
        deployer, proxy, ["create", "-f", str(path)], freeze_after=pause_made
    )
    assert code == 3, error
    assert f"gave no answer within {ANSWER} s" in error, error
    assert after < 10 * ANSWER, after


async def test_a_replacement_whose_engine_stops_answering_is_exit_3(
    deployer: Deployer,
    proxy: EngineProxy,
    name: Callable[[str], str],
    markers: Path,
    tmp_path: Path,
) -> None:
    """``create`` of a changed plan drains the old workload first; frozen at its SIGTERM, the
    replacement ends with exit 3 (the drain is unreachable) and creates nothing."""
    workload = name("frozenreplace")
    await deployer.create(
        plan(workload, [graceful("old", 60, markers)], termination_grace_period_seconds=3)
    )
    await deployer.wait_ready(workload, timeout=30)
    changed = plan_file(
        tmp_path,
        workload,
        [{"name": "new", "image": "asyncdeploy-test/busybox:latest", "command": ["sleep", "600"]}],
        termination_grace_period_seconds=3,
    )
    code, error, _, after = await through_frozen_proxy(
        deployer,
        proxy,
        ["create", "-f", str(changed), "--output", "json"],
        freeze_when=lambda line: line.get("event") == "SignalSent",
    )
    assert code == 3, error
    assert after < 3 + 3 * ANSWER + 30, after
    proxy.release()  # (what the frozen CLI had sent reaches the engine now)
    listed = await deployer.driver.session.containers({LABEL_WORKLOAD: workload})  # type: ignore[attr-defined]
    assert not [c for c in listed if c["Labels"].get(LABEL_CONTAINER) == "new"], listed


async def engine_events(engine: str, since: float, until: float) -> list[tuple[int, str, str]]:
    """Each engine event from ``since`` to ``until`` (wall clock): its time in nanoseconds,
    what happened (Docker's action, Podman's status: ``exec_create: …``, ``exec``, ``pause``,
    ``create``) and to what (a container's id, a volume's name)."""
    cli = shutil.which(engine)
    assert cli is not None
    window = ["--since", f"{since:.3f}", "--until", f"{until:.3f}"]
    shape = ["--format", "{{json .}}"] if engine == "docker" else ["--format", "json"]
    done = await anyio.run_process([cli, "events", *window, *shape])
    events: list[tuple[int, str, str]] = []
    for line in done.stdout.decode().splitlines():
        event = json.loads(line)
        if engine == "docker":
            events.append((int(event["timeNano"]), event["Action"], event["Actor"]["ID"]))
        else:  # RFC 3339 with nanoseconds, in UTC: 2026-12-07T12:36:57.77522587Z
            whole, _, fraction = event["Time"].rstrip("Z").partition(".")
            seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
            nanoseconds = seconds * 10**9 + int((fraction or "0").ljust(9, "0")[:9])
            events.append((nanoseconds, event["Status"], event.get("ID") or event.get("Name", "")))
    return events


async def test_a_gated_drains_hook_is_made_ready_beside_its_claim(
    deployer: Deployer, proxy: EngineProxy, name: Callable[[str], str]
) -> None:
    """The gate's drain call goes out through a probe program started in the gate container
    at the drain's start, beside the claim, not after it: with the engine slow to answer the
    claim, the engine started that exec before it made the claim (before: the exec came after
    the claim, an exec's start, a tenth to a fifth of a second here, between the drain's start
    and the engine's stop signal). The drain itself is as without it: the hook answered 0,
    then the engine's signal."""
    engine = deployer.driver_name
    require_images(engine)
    workload = name("ahead")
    await deployer.create(stock_plan(workload, free_port(), gated=True))
    await deployer.wait_ready(workload, timeout=90)
    containers = (await deployer.inspect(workload))["containers"]
    gate, pause = containers["engine-gate"]["Id"], containers["pause"]["Id"]
    # the claim: Docker creates the pause container's claim volume, Podman pauses it
    claimed = ("create", claim_volume(pause)) if engine == "docker" else ("pause", pause)
    proxy.slow("POST", "/volumes/create" if engine == "docker" else f"/{pause}/pause")
    env = {**os.environ, "DOCKER_HOST": proxy.url, "CONTAINER_HOST": proxy.url}
    command = [sys.executable, "-m", "asyncdeploy", "--driver", engine]

    since = time.time()
    done = await delete_while_held(proxy, command, env, workload, 3)  # an exec starts in less
    assert done.returncode == 0, done.stderr.decode()
    assert proxy.held.is_set()
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line]
    hook = next(line for line in lines if line.get("event") == "PreStopFinished")
    assert (hook["container"], hook["exit_code"]) == ("engine", 0), hook
    assert order(lines, "PreStopFinished", "engine") < order(lines, "SignalSent", "engine")
    events = await engine_events(engine, since, time.time() + 1)
    execs = [at for at, what, whom in events if whom == gate and what.startswith("exec")]
    claims = [at for at, what, whom in events if (what, whom) == claimed]
    assert execs and claims, events
    assert min(execs) < min(claims), (execs, claims)
