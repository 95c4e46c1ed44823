"""Behind a stock HAProxy that does not retry, a drained demo server shows clients no 503.

Two real demo processes behind Debian's ``haproxy`` (``GET /ready`` every 500 ms, ``fall 1``, no
``retry-on``), clients that keep sending short requests and count every non-200 as a failure,
streams beside them; one server is told to drain (SIGTERM, or the preStop drain command). A
server that refuses new work the instant it drains answers 503 to what HAProxy sends before its
next check; one that serves through its propagation window loses nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process

import asyncdeploy
from tests.polling import until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("haproxy") is None and not os.environ.get("CI"),
        reason="needs Debian's haproxy (apt-get install -y haproxy)",
    ),
]

_ROOT = str(Path(asyncdeploy.__file__).resolve().parent.parent)
_ENV = {**os.environ, "PYTHONPATH": _ROOT, "PYTHONUNBUFFERED": "1"}

HAPROXY_CONFIG = """\
global
    stats socket {stats} mode 600 level admin

defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    # a check answers in ms; 2 s only keeps a loaded test machine from failing both at once
    timeout check 2s

frontend clients
    bind 127.0.0.1:{port}
    default_backend servers

backend servers
    balance roundrobin
    option httpchk GET /ready
    http-check expect status 200
{servers}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Demo:
    def __init__(self, process: Process, port: int, sock: Path, log: Path) -> None:
        self.process = process
        self.port = port
        self.sock = sock
        self.log = log

    def exit_statistics(self) -> dict[str, Any]:
        match = re.search(r"exiting: (\{.*\})", self.log.read_text())
        assert match, self.log.read_text()
        return dict(json.loads(match.group(1)))


def _private_directory(directory: Path) -> Path:
    directory.mkdir(mode=0o700)
    return directory


@asynccontextmanager
async def demo_server(directory: Path, *flags: str) -> AsyncIterator[Demo]:
    sock, log = directory / "c.sock", directory / "demo.log"
    command = [sys.executable, "-m", "asyncdeploy.workload.demo", "--host", "127.0.0.1"]
    command += ["--port", "0", "--control-socket", str(sock), "--drain-timeout", "20s", *flags]
    with log.open("wb") as out:
        process = await anyio.open_process(command, stdout=out, stderr=subprocess.STDOUT, env=_ENV)
    try:
        with anyio.fail_after(15):
            while not (
                match := re.search(r"serving on http://127\.0\.0\.1:(\d+)", log.read_text())
            ):
                assert process.returncode is None, log.read_text()
                await anyio.sleep(0.05)
        yield Demo(process, int(match.group(1)), sock, log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await process.aclose()


async def _haproxy_servers_up(stats: Path) -> set[str]:
    stream = await anyio.connect_unix(str(stats))
    async with stream:
        await stream.send(b"show stat\n")
        data = b""
        with anyio.move_on_after(2):
            while True:
                try:
                    data += await stream.receive()
                except anyio.EndOfStream:
                    break
    up = set()
    for line in data.decode().splitlines():
        fields = line.split(",")
        if (
            len(fields) > 17
            and fields[0] == "servers"
            and fields[1] != "BACKEND"
            and fields[17] == "UP"
        ):
            up.add(fields[1])
    return up


@asynccontextmanager
async def haproxy(
    directory: Path, demos: list[Demo], check_every_ms: int = 500
) -> AsyncIterator[str]:
    """A stock HAProxy in front of ``demos``; yields its URL once every server is UP."""
    port, stats = _free_port(), directory / "haproxy.sock"
    servers = "\n".join(
        f"    server s{index} 127.0.0.1:{demo.port} check inter {check_every_ms} fall 1 rise 1"
        for index, demo in enumerate(demos)
    )
    config = directory / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(stats=stats, port=port, servers=servers))
    log = directory / "haproxy.log"
    with log.open("wb") as out:
        process = await anyio.open_process(
            ["haproxy", "-f", str(config), "-db"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        with anyio.fail_after(15):
            while True:
                assert process.returncode is None, log.read_text()
                if stats.exists() and len(await _haproxy_servers_up(stats)) == len(demos):
                    break
                await anyio.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.terminate()
        with anyio.move_on_after(5, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()


async def _short_requests(base: str, stop: anyio.Event, statuses: Counter[int | str]) -> None:
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
        while not stop.is_set():
            try:
                response = await client.get("/short")
                statuses[response.status_code] += 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1


async def _streams(base: str, stop: anyio.Event, results: list[str]) -> None:
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
        while not stop.is_set():
            body = ""
            try:
                async with client.stream("GET", "/stream?tokens=20&pace=0.1") as response:
                    if response.status_code != 200:
                        results.append(f"status {response.status_code}")
                        continue
                    async for chunk in response.aiter_text():
                        body += chunk
            except httpx.HTTPError as exc:
                results.append(f"broken: {exc!r}")
                continue
            ends = re.findall(r"^event: (\w+)$", body, re.MULTILINE)
            results.append("complete" if ends == ["token"] * 20 + ["done"] else f"cut {ends}")


async def _drain_under_traffic(
    tmp_path: Path, trigger: str, *flags: str, check_every_ms: int = 500
) -> tuple[Counter[int | str], Demo]:
    async with (
        demo_server(_private_directory(tmp_path / "a"), *flags) as drained,
        demo_server(_private_directory(tmp_path / "b")) as survivor,
        haproxy(tmp_path, [drained, survivor], check_every_ms) as base,
    ):
        statuses: Counter[int | str] = Counter()
        streams: list[str] = []
        stop = anyio.Event()
        hook: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(_short_requests, base, stop, statuses)
            for _ in range(2):
                tg.start_soon(_streams, base, stop, streams)
            await until(lambda: statuses[200] > 5, timeout=30)  # traffic flows (a loaded
            await anyio.sleep(1.0)  # machine starts slowly); the streams are open at the drain
            before = statuses[200]
            if trigger == "sigterm":
                drained.process.send_signal(signal.SIGTERM)
            else:  # the preStop hook, then the stop signal, as an engine runs them
                result = await anyio.run_process(
                    [
                        sys.executable,
                        "-m",
                        "asyncdeploy.workload.drain_cmd",
                        "--socket",
                        str(drained.sock),
                        "--timeout",
                        "25s",
                    ],
                    env=_ENV,
                    check=False,
                )
                hook["returncode"] = result.returncode
                hook["report"] = json.loads(result.stdout or b"{}")
                drained.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                assert await drained.process.wait() == 0, drained.log.read_text()
            await anyio.sleep(1.0)  # traffic goes on after the server is gone
            stop.set()
        if flags:  # the negative control: the caller looks at what the clients saw
            return statuses, drained
        failures = {key: count for key, count in statuses.items() if key != 200}
        assert failures == {}, (failures, drained.log.read_text())
        assert statuses[200] - before > 5, statuses  # and it kept flowing after the drain
        assert streams and set(streams) == {"complete"}, streams
        stats = drained.exit_statistics()
        # served through the window, closed because traffic visibly left
        assert stats["rejected_while_draining"] == 0, stats
        assert stats["window_close_reason"] == "traffic-left", stats
        assert stats["readiness_failed_after"] is not None and stats["readiness_failed_after"] < 3
        assert 0 <= stats["propagation_observed"] < 5, stats
        if hook:
            assert hook["returncode"] == 0, hook
            report = hook["report"]
            assert report["drained"] and report["window_close_reason"] == "traffic-left", report
            assert report["propagation_observed"] == pytest.approx(
                stats["propagation_observed"], abs=0.01
            )
        return statuses, drained


async def test_sigterm_behind_haproxy_shows_clients_no_503(tmp_path: Path) -> None:
    """SIGTERM to one of two servers: every short request is 200, every stream complete."""
    await _drain_under_traffic(tmp_path, "sigterm")


async def test_prestop_drain_behind_haproxy_shows_clients_no_503(tmp_path: Path) -> None:
    """The preStop drain command, then SIGTERM: no 503, and the hook reports the propagation."""
    await _drain_under_traffic(tmp_path, "drain-command")


async def test_refusing_at_once_behind_haproxy_shows_clients_503s(tmp_path: Path) -> None:
    """The negative control (what main did): --refuse-at-once behind a balancer that does not
    retry answers 503 to what HAProxy sends before its next check."""
    # checked every 2 s (a balancer's usual interval): what it sends to the refusing server
    # before its next check is certain to be seen even on a loaded machine
    statuses, drained = await _drain_under_traffic(
        tmp_path, "sigterm", "--refuse-at-once", check_every_ms=2000
    )
    assert statuses[503] > 0, statuses
    assert drained.exit_statistics()["rejected_while_draining"] > 0
