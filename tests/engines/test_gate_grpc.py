"""A stock gRPC server behind the drain gate (``gate: {protocol: h2c}``), on real Docker and
Podman, with grpcio as the client: clients call (unary and server streaming) until their first
refusal while ``asyncdeploy delete`` runs: no call is cut, every one ends OK and whole or is
refused before any work (the gate's GOAWAY, then the closed port); without the gate (the same server published
directly, the negative control) the delete cuts them.

The server is ``asyncdeploy-test/grpc-engine`` (``ci/build-grpc-image.sh``): grpcio, nothing of
asyncdeploy, ended at once by SIGTERM.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import yaml

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.plan import plan_to_mapping
from tests.engines.cli_process import start_cli
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL
from tests.engines.test_gate import free_port

grpc = pytest.importorskip("grpc", reason="grpcio is in the test dependency group")

pytestmark = pytest.mark.anyio
logger = logging.getLogger(__name__)

GATE_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_GATE_IMAGE", "localhost/asyncdeploy/gate:latest")
GRPC_IMAGE = "asyncdeploy-test/grpc-engine:latest"
TOKENS = 30  # a stream: 30 messages 100 ms apart, 3 s
SLOW_MS = 3000  # a unary call's work


def require_images(engine: str) -> None:
    cli = shutil.which(engine)
    if cli is None:
        pytest.skip(f"no {engine} CLI")
    for image, script in ((GATE_IMAGE, "build-gate-image.sh"), (GRPC_IMAGE, "build-grpc-image.sh")):
        found = subprocess.run([cli, "image", "inspect", image], capture_output=True, check=False)
        if found.returncode != 0:
            pytest.fail(f"{image} missing in {engine}: run ci/{script}")


def grpc_plan(
    name: str,
    port: int,
    *,
    gated: bool,
    image: str = GRPC_IMAGE,
    gate_image: str = GATE_IMAGE,
    labels: dict[str, str] | None = None,
    host_ip: str | None = None,
    **engine_extra: Any,
) -> WorkloadPlan:
    """The gRPC engine published on ``port`` (of ``host_ip``): behind its gate (``gated``), or
    directly."""
    published: dict[str, Any] = {"host_port": port}
    if host_ip is not None:
        published["host_ip"] = host_ip
    engine: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "args": ["--port", "8001", "--slow-ms", str(SLOW_MS), "--tokens", str(TOKENS)],
        **engine_extra,
    }
    if gated:
        engine["ports"] = [{"container_port": 8000, **published}]
        engine["gate"] = {
            "upstream": 8001,
            "protocol": "h2c",
            "image": gate_image,
            "propagation_seconds": 1,
        }
    else:  # the negative control: the engine published directly, checked by a TCP connect
        engine["ports"] = [{"container_port": 8001, **published}]
        engine["checks"] = {"readiness": {"tcp": 8001}}
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": labels or {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "termination_grace_period_seconds": 20,
            "containers": [engine],
        }
    )


def refused(exc: Any) -> bool:
    """Refused before any work, retryable: the port closed (after the gate's GOAWAY, or the
    workload gone) or the gate's 503 past the window."""
    details = exc.details() or ""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in details or "status: 503" in details
    )


def unary(channel: Any) -> str:
    try:
        answer = channel.unary_unary("/asyncdeploy.test.Engine/Slow")(b"x", timeout=30)
    except grpc.RpcError as exc:
        return "refused" if refused(exc) else f"unary: {exc.code()} {exc.details()}"
    return "ok" if answer == b"done:x" else f"unary: {answer!r}"


def stream(channel: Any) -> str:
    received: list[bytes] = []
    try:
        for message in channel.unary_stream("/asyncdeploy.test.Engine/Tokens")(b"x", timeout=30):
            received.append(message)  # noqa: PERF402 (one by one: what came before a cut)
    except grpc.RpcError as exc:
        if not received and refused(exc):
            return "refused"
        return f"stream cut after {len(received)}: {exc.code()} {exc.details()}"
    return "ok" if received == [b"%d" % i for i in range(TOKENS)] else f"stream: {received}"


async def disrupt_during_calls(driver: str, port: int, *command: str) -> list[str]:
    """Four clients of unary calls and four of streams, each calling until its first
    refusal, and the CLI's ``command`` (a delete, a replace): every call's outcome (ok,
    refused, or what cut it)."""

    async def cli() -> None:
        running = await start_cli(driver, *command, "-o", "json")
        code, stderr = await running.finish(timeout=60)
        assert code == 0, stderr

    return await during_calls(port, cli)


async def during_calls(port: int, disrupt: Callable[[], Awaitable[None]]) -> list[str]:
    """:func:`disrupt_during_calls` with any ``disrupt`` (the Deployer's, on the cluster)."""
    outcomes: list[str] = []

    async def client(kind: Callable[[Any], str], channel: Any) -> None:
        while True:
            outcomes.append(await anyio.to_thread.run_sync(kind, channel))
            if outcomes[-1] != "ok":
                return

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for kind in [unary] * 4 + [stream] * 4:
                tg.start_soon(client, kind, channel)
            await anyio.sleep(1.0)  # every client has a call at the engine
            await disrupt()
    return outcomes


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_grpc_calls_in_flight_end_whole_through_a_delete_or_replace_behind_the_gate(
    deployer: Deployer, name: Callable[[str], str], mode: str, tmp_path: Path
) -> None:
    require_images(deployer.driver_name)
    port = free_port()
    plan = grpc_plan(name("grpc"), port, gated=True)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    command: tuple[str, ...] = ("delete", plan.name)
    if mode == "replace":
        # the same plan, another version: its host port held, the old copy drains first
        engine = plan.containers[0]
        args = (*(engine.args or ()), "--token-ms", "99")
        successor = attrs.evolve(plan, containers=[attrs.evolve(engine, args=args)])
        path = tmp_path / "v2.yaml"
        path.write_text(yaml.safe_dump(plan_to_mapping(successor)))
        command = ("replace", "-f", str(path))
    outcomes = await disrupt_during_calls(deployer.driver_name, port, *command)
    logger.info(f"{deployer.driver_name} gRPC behind the gate, {mode}: {outcomes}")
    cut = [outcome for outcome in outcomes if outcome not in ("ok", "refused")]
    assert cut == [], outcomes
    assert outcomes.count("ok") >= 8, outcomes


async def test_without_the_gate_the_delete_cuts_grpc_calls(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    require_images(deployer.driver_name)
    port = free_port()
    plan = grpc_plan(name("grpcnogate"), port, gated=False)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    outcomes = await disrupt_during_calls(deployer.driver_name, port, "delete", plan.name)
    logger.info(f"{deployer.driver_name} gRPC without the gate: {outcomes}")
    assert any(outcome not in ("ok", "refused") for outcome in outcomes), outcomes
