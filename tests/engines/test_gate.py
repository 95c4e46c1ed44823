"""An unmodified server behind the drain gate, on real Docker and Podman.

The server is ``asyncdeploy-test/stock-engine`` (``ci/build-gate-image.sh``): it knows nothing
of asyncdeploy, exits at once on SIGTERM (vLLM's default), and its image has no shell, wget,
curl or python3, so no check can run inside it. Clients send short and streaming requests
through the published port while ``asyncdeploy delete`` runs. A request counts as:

* ok: a 200 with the whole answer (a stream: every token and ``[DONE]``);
* refused: an explicit, retryable ``503`` + ``Retry-After`` before any work, or a connection
  refused once the workload is gone (each client stops at its first refusal);
* failed: anything else (a reset, a truncated stream, a 502, a read error, a timeout).

With the gate nothing fails; without it (the same engine published directly, the negative
control) the delete cuts what is in flight.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.verify._ports import free_port
from tests.engines.cli_process import start_cli
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio
logger = logging.getLogger(__name__)

GATE_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_GATE_IMAGE", "localhost/asyncdeploy/gate:latest")
STOCK_IMAGE = "asyncdeploy-test/stock-engine:latest"
TOKENS = 30  # a stream: 30 tokens at 20/s, 1.5 s


def require_images(engine: str) -> None:
    cli = shutil.which(engine)
    if cli is None:
        pytest.skip(f"no {engine} CLI")
    for image in (GATE_IMAGE, STOCK_IMAGE):
        found = subprocess.run([cli, "image", "inspect", image], capture_output=True, check=False)
        if found.returncode != 0:
            pytest.fail(f"{image} missing in {engine}: run ci/build-gate-image.sh")


def stock_plan(name: str, port: int, *, gated: bool) -> WorkloadPlan:
    engine: dict[str, Any] = {
        "name": "engine",
        "image": STOCK_IMAGE,
        "args": ["--port", "8001", "--load-seconds", "2", "--token-ms", "50"],
    }
    if gated:
        engine["ports"] = [{"container_port": 8000, "host_port": port}]
        engine["gate"] = {
            "upstream": 8001,
            "ready": {"path": "/health"},
            "image": GATE_IMAGE,
            "propagation_seconds": 1,
        }
    else:  # the negative control: the engine published directly, checked from outside
        engine["ports"] = [{"container_port": 8001, "host_port": port}]
        engine["checks"] = {"readiness": {"http": {"port": 8001, "path": "/health"}}}
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "termination_grace_period_seconds": 20,
            "containers": [engine],
        }
    )


class Traffic:
    """Short and streaming clients, each until its first refusal; every outcome counted."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []

    def _refused(self, exc: BaseException) -> bool:
        cause: BaseException | None = exc
        while cause is not None:
            if (
                isinstance(cause, ConnectionRefusedError)
                or getattr(cause, "errno", None) == errno.ECONNREFUSED
            ):
                return True
            cause = cause.__cause__ or cause.__context__
        return False

    def _count(self, outcome: str, detail: str = "") -> bool:
        self.counts[outcome] += 1
        if outcome == "failed":
            self.failures.append(detail)
        return outcome == "ok"

    async def short(self, client: httpx.AsyncClient) -> bool:
        try:
            response = await client.get(f"{self.base}/short")
        except httpx.ConnectError as exc:
            return self._count("refused" if self._refused(exc) else "failed", repr(exc))
        except httpx.HTTPError as exc:
            return self._count("failed", f"short: {exc!r}")
        if response.status_code == 503 and "retry-after" in response.headers:
            return self._count("refused")
        if response.status_code != 200 or response.json() != {"ok": True}:
            return self._count("failed", f"short: {response.status_code} {response.text[:80]}")
        return self._count("ok")

    async def stream(self, client: httpx.AsyncClient) -> bool:
        tokens, done = 0, False
        try:
            async with client.stream(
                "GET", f"{self.base}/stream?tokens={TOKENS}&ms=50"
            ) as response:
                if response.status_code == 503 and "retry-after" in response.headers:
                    return self._count("refused")
                if response.status_code != 200:
                    return self._count("failed", f"stream: {response.status_code}")
                async for line in response.aiter_lines():
                    tokens += line.startswith("data: {")
                    done = done or line == "data: [DONE]"
        except httpx.ConnectError as exc:
            return self._count("refused" if self._refused(exc) else "failed", repr(exc))
        except httpx.HTTPError as exc:
            return self._count("failed", f"stream cut after {tokens} tokens: {exc!r}")
        if tokens != TOKENS or not done:
            return self._count("failed", f"stream truncated: {tokens} tokens, done={done}")
        return self._count("ok")

    async def loop(self, kind: str) -> None:
        timeout = httpx.Timeout(20.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            call = self.short if kind == "short" else self.stream
            while await call(client):
                if kind == "short":
                    await anyio.sleep(0.02)


async def delete_under_traffic(
    driver: str, name: str, port: int
) -> tuple[Traffic, list[dict[str, Any]]]:
    traffic = Traffic(port)
    # Every client ends at its first refusal: after the delete, at the latest.
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for kind in ["short"] * 4 + ["stream"] * 4:
                tg.start_soon(traffic.loop, kind)
            await anyio.sleep(1.0)  # streams are mid-way when the delete starts
            cli = await start_cli(driver, "delete", name, "-o", "json")
            code, stderr = await cli.finish(timeout=60)
            assert code == 0, stderr
    return traffic, cli.lines


def order(lines: list[dict[str, Any]], event: str, container: str) -> int:
    return next(
        i
        for i, line in enumerate(lines)
        if line.get("event") == event and line.get("container") == container
    )


async def test_the_stock_image_has_no_shell_wget_or_python(deployer: Deployer) -> None:
    """The image the gate tests run cannot host a check: none of the usual tools start."""
    require_images(deployer.driver_name)
    cli = shutil.which(deployer.driver_name)
    assert cli is not None
    for tool in ("sh", "/bin/sh", "wget", "curl", "python3", "python", "busybox"):
        run = [cli, "run", "--rm", "--network", "none", "--entrypoint", tool, STOCK_IMAGE]
        result = await anyio.run_process(run, check=False)
        assert result.returncode != 0, f"{tool} ran in {STOCK_IMAGE}"


async def test_an_unmodified_server_is_ready_and_drains_losslessly_behind_the_gate(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Ready only once the engine's /health answers; a delete under traffic fails nothing;
    the engine is signalled after the gate drained, the gate after the engine exited."""
    require_images(deployer.driver_name)
    port = free_port()
    plan = stock_plan(name("gate"), port, gated=True)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    async with httpx.AsyncClient() as client:
        ready = (await client.get(f"http://127.0.0.1:{port}/ready")).json()
        assert ready == {"ok": True, "state": "serving", "in_flight": 0, "engine": True}
        # The engine's own paths pass through, its /metrics too.
        metrics = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert metrics.text.startswith("engine_requests_total")
        body = bytes(range(256)) * 8192  # 2 MiB, chunked by httpx from an iterator

        async def pieces() -> Any:
            yield body[:999]
            yield body[999:]

        echo = await client.post(f"http://127.0.0.1:{port}/echo", content=pieces())
        assert echo.json()["length"] == len(body)

    traffic, lines = await delete_under_traffic(deployer.driver_name, plan.name, port)
    logger.info(f"{deployer.driver_name} behind the gate: {dict(traffic.counts)}")
    assert traffic.failures == [], traffic.failures
    assert traffic.counts["ok"] >= 8, traffic.counts
    assert traffic.counts["failed"] == 0
    # The drain's order: the gate's drain (the engine's pre-stop GET, exit 0), then the
    # engine's signal and exit, then the gate's signal.
    hook = next(line for line in lines if line.get("event") == "PreStopFinished")
    assert (hook["container"], hook["exit_code"]) == ("engine", 0)
    assert order(lines, "PreStopFinished", "engine") < order(lines, "SignalSent", "engine")
    assert order(lines, "ContainerExited", "engine") < order(lines, "SignalSent", "engine-gate")


async def test_without_the_gate_the_same_server_loses_requests(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """The negative control: published directly, the stock server's delete cuts what is in
    flight (its readiness is checked from outside: the image has no tool to check it with)."""
    require_images(deployer.driver_name)
    port = free_port()
    plan = stock_plan(name("nogate"), port, gated=False)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    traffic, _ = await delete_under_traffic(deployer.driver_name, plan.name, port)
    logger.info(
        f"{deployer.driver_name} without the gate: {dict(traffic.counts)} {traffic.failures[:3]}"
    )
    assert traffic.counts["failed"] > 0, traffic.counts


@pytest.mark.parametrize("check", ["http", "tcp"])
async def test_http_and_tcp_checks_need_nothing_inside_the_container(
    deployer: Deployer, name: Callable[[str], str], check: str
) -> None:
    """A readiness check on an image with no shell, wget or python: sent from outside, it
    waits for the server (not ready while /health answers 503 or nothing listens) and then
    passes. Before, it ran `wget || python3` inside the container and never passed."""
    require_images(deployer.driver_name)
    probe = {"http": {"port": 8001, "path": "/health"}} if check == "http" else {"tcp": 8001}
    plan = WorkloadPlan.from_mapping(
        {
            "name": name(f"chk{check}"),
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "containers": [
                {
                    "name": "engine",
                    "image": STOCK_IMAGE,
                    "args": ["--port", "8001", "--load-seconds", "4"],
                    "checks": {"readiness": {**probe, "period_seconds": 1}},
                }
            ],
        }
    )
    await deployer.create(plan)
    if check == "http":  # /health answers 503 for 4 s: not ready yet
        with pytest.raises(Exception, match="not ready"):
            await deployer.wait_ready(plan.name, timeout=1.5)
    status = await deployer.wait_ready(plan.name, timeout=60)
    assert status.name == plan.name
