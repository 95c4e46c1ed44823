"""The demo entry point as a real process: SIGTERM, the preStop drain command, the negative control."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process

import asyncdeploy

pytestmark = pytest.mark.anyio

_ROOT = str(Path(asyncdeploy.__file__).resolve().parent.parent)
_ENV = {**os.environ, "PYTHONPATH": _ROOT, "PYTHONUNBUFFERED": "1"}


@asynccontextmanager
async def demo_process(tmp_path: Path, *args: str) -> AsyncIterator[tuple[Process, str, Path]]:
    """Start the demo on an ephemeral port; yield (process, base URL, control socket)."""
    sock = tmp_path / "c.sock"
    log = tmp_path / "demo.log"
    command = [sys.executable, "-m", "asyncdeploy.workload.demo", "--host", "127.0.0.1"]
    command += ["--port", "0", "--control-socket", str(sock), "--log-level", "info", *args]
    with log.open("wb") as out:
        process = await anyio.open_process(command, stdout=out, stderr=subprocess.STDOUT, env=_ENV)
    try:
        with anyio.fail_after(10):
            while not (
                match := re.search(r"serving on (http://127\.0\.0\.1:\d+)", log.read_text())
            ):
                assert process.returncode is None, log.read_text()
                await anyio.sleep(0.05)
        yield process, match.group(1), sock
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await process.aclose()


async def read_stream(client: httpx.AsyncClient, url: str, first_token: anyio.Event) -> str:
    """The SSE body as far as it got (a torn connection ends it early)."""
    text = ""
    try:
        async with client.stream("GET", url) as response:
            async for chunk in response.aiter_text():
                text += chunk
                first_token.set()
    except httpx.HTTPError:
        pass  # truncated: the process died mid-body
    return text


def events(body: str) -> list[str]:
    return re.findall(r"^event: (\w+)$", body, re.MULTILINE)


async def test_sigterm_drains_the_open_stream_then_exits(tmp_path: Path) -> None:
    """SIGTERM: readiness fails at once, the stream ends with done, the process exits 0 (the
    test's probe plays a balancer checking every 0.1 s, out after one failure)."""
    flags = ("--drain-timeout", "10s", "--balancer-interval", "0.1s", "--balancer-fall", "1")
    async with demo_process(tmp_path, *flags) as (process, base, sock):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
            first = anyio.Event()
            result: dict[str, Any] = {}

            async def consume() -> None:
                result["body"] = await read_stream(client, "/stream?tokens=10&pace=0.05", first)

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await first.wait()
                process.send_signal(signal.SIGTERM)
                await anyio.sleep(0.1)
                assert (await client.get("/ready")).status_code == 503
                assert (await client.get("/live")).status_code == 200
        with anyio.fail_after(5):
            assert await process.wait() == 0
    assert events(result["body"]) == ["token"] * 10 + ["done"]
    assert not sock.exists()


async def test_prestop_drain_command_then_sigterm(tmp_path: Path) -> None:
    """drain_cmd waits for the stream; the server keeps running until SIGTERM, then exits fast."""
    async with demo_process(tmp_path, "--drain-timeout", "10s") as (process, base, sock):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
            first = anyio.Event()
            result: dict[str, Any] = {}

            async def consume() -> None:
                # 5 s: still open when the hook's interpreter has started on a loaded machine
                result["body"] = await read_stream(client, "/stream?tokens=100&pace=0.05", first)

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await first.wait()
                hook = await anyio.run_process(
                    [
                        sys.executable,
                        "-m",
                        "asyncdeploy.workload.drain_cmd",
                        "--socket",
                        str(sock),
                        "--propagation-wait",
                        "100ms",
                        "--timeout",
                        "15s",
                    ],
                    env=_ENV,
                    check=False,
                )
            report = json.loads(hook.stdout)
            assert hook.returncode == 0, hook.stderr
            assert report["drained"]
            assert report["started_drain"]
            assert report["initial"]["in_flight"] == 1, (
                report,
                (tmp_path / "demo.log").read_text(),
            )
            assert report["final"]["in_flight"] == 0
            await anyio.sleep(0.3)
            assert process.returncode is None  # drained, but waiting for SIGTERM
            assert (await client.get("/ready")).status_code == 503
        with anyio.fail_after(3):
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    assert events(result["body"]) == ["token"] * 100 + ["done"]


async def test_ignore_sigterm_gets_killed_and_truncates(tmp_path: Path) -> None:
    """Negative control: SIGTERM changes nothing; the SIGKILL that follows tears the stream."""
    async with demo_process(tmp_path, "--ignore-sigterm") as (process, base, _):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
            first = anyio.Event()
            result: dict[str, Any] = {}

            async def consume() -> None:
                # 5 s: still open when the hook's interpreter has started on a loaded machine
                result["body"] = await read_stream(client, "/stream?tokens=100&pace=0.05", first)

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await first.wait()
                process.send_signal(signal.SIGTERM)
                await anyio.sleep(0.3)
                assert process.returncode is None
                assert (await client.get("/ready")).status_code == 200  # no drain happened
                process.kill()
        assert await process.wait() == -signal.SIGKILL
    assert "token" in events(result["body"])
    assert "done" not in events(result["body"])
    assert "cut" not in events(result["body"])


@pytest.mark.parametrize(
    ("flags", "during_drain"), [((), 200), (("--refuse-at-once",), 503)], ids=["window", "refuse"]
)
async def test_the_demo_serves_or_refuses_new_work_during_a_drain(
    tmp_path: Path, flags: tuple[str, ...], during_drain: int
) -> None:
    """By default a new request during the drain is served (the propagation window);
    --refuse-at-once answers it 503 + Retry-After at once. Readiness fails either way. (The
    deployer's ``traffic-left`` then ends the window early, as the Kubernetes driver's does:
    without it the window runs to its 10 s.)"""
    async with demo_process(tmp_path, *flags) as (process, base, sock):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
            first = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_stream, client, "/stream?tokens=20&pace=0.05", first)
                await first.wait()  # something in flight keeps the drain open
                process.send_signal(signal.SIGTERM)
                await anyio.sleep(0.2)
                assert (await client.get("/ready")).status_code == 503
                response = await client.get("/short")
                told = await anyio.run_process(
                    [sys.executable, "-m", "asyncdeploy.workload.drain_cmd", "--socket",
                     str(sock), "--traffic-left"],
                    env=_ENV, check=False,
                )  # fmt: skip
                assert told.returncode == 0, told.stderr
            assert response.status_code == during_drain
            if during_drain == 503:
                assert response.headers["retry-after"] == "5"
        with anyio.fail_after(20):
            assert await process.wait() == 0
