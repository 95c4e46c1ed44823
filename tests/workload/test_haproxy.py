"""Behind a stock HAProxy that does not retry, a drained demo server shows clients no 503.

Two real demo processes behind Debian's ``haproxy`` at its own check defaults (``GET /ready``,
``inter 2s fall 3 rise 2``: a drained server leaves the pool 4-6 s after its drain starts), no
``retry-on``; the sparse traffic of an inference server (about 1 request/s per server) from
keep-alive clients (one pooled httpx client each, as the OpenAI SDK has) that count every
non-200 as a failure, streams beside them; one server is told to drain (SIGTERM, or the
preStop drain command). A server that refuses new work before HAProxy has taken it out answers
503 to what HAProxy still sends; one that serves through its propagation window loses nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
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
from asyncdeploy.verify._ports import free_port
from asyncdeploy.workload._unix import connect_unix
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

frontend clients
    bind 127.0.0.1:{port}
    default_backend servers

backend servers
    balance roundrobin
    option httpchk GET /ready
    http-check expect status 200
{servers}
"""


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
    stream = await connect_unix(str(stats))
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
async def haproxy(directory: Path, demos: list[Demo], check: str = "") -> AsyncIterator[str]:
    """A stock HAProxy in front of ``demos`` (``check``: settings after ``check``, e.g.
    ``inter 500 fall 1``; none: HAProxy's defaults); yields its URL once every server is UP."""
    port, stats = free_port(), directory / "haproxy.sock"
    servers = "\n".join(
        f"    server s{index} 127.0.0.1:{demo.port} check {check}".rstrip()
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
        # at HAProxy's defaults a server that failed its first checks needs 3 x 2 s to fall and
        # 2 x 2 s to rise again: a loaded machine's slow start takes that long
        with anyio.fail_after(40):
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


async def _short_requests(
    base: str, stop: anyio.Event, statuses: Counter[int | str], every: float = 0.0
) -> None:
    """GET /short on one kept-alive connection pool, one request ``every`` seconds."""
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
        while not stop.is_set():
            try:
                response = await client.get("/short")
                statuses[response.status_code] += 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
            with anyio.move_on_after(every):
                await stop.wait()


# The sparse traffic of an inference server (issue 23: under 1 request/s per server), every
# client a kept-alive pool: a short request every 1.1 s and a 2 s stream every 8 s, for two
# servers, so a server sees a new request about every 2.2 s: gaps longer than the quiet period
# (2 s) that ended the old window after one failed probe, while HAProxy still sent.
SHORT_EVERY = 1.1
STREAM_PAUSE = 6.0


async def _streams(
    base: str, stop: anyio.Event, results: list[str], pause: float = STREAM_PAUSE
) -> None:
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
        while not stop.is_set():
            if results:
                with anyio.move_on_after(pause):
                    await stop.wait()
                if stop.is_set():
                    break
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
    tmp_path: Path,
    trigger: str,
    *flags: str,
    check: str = "",
    hook_flags: tuple[str, ...] = (),
    dense: bool = False,
) -> tuple[Counter[int | str], Demo]:
    async with (
        demo_server(_private_directory(tmp_path / "a"), *flags) as drained,
        demo_server(_private_directory(tmp_path / "b")) as survivor,
        haproxy(tmp_path, [drained, survivor], check) as base,
    ):
        statuses: Counter[int | str] = Counter()
        streams: list[str] = []
        stop = anyio.Event()
        hook: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            for _ in range(6 if dense else 1):  # dense: back to back
                tg.start_soon(_short_requests, base, stop, statuses, 0 if dense else SHORT_EVERY)
            for _ in range(2 if dense else 1):
                tg.start_soon(_streams, base, stop, streams, 0 if dense else STREAM_PAUSE)
            await until(lambda: statuses[200] >= 2, timeout=30)  # flowing; a first stream open
            await anyio.sleep(0.5)  # (a loaded machine starts slowly); a stream is open
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
                        *hook_flags,
                    ],
                    env=_ENV,
                    check=False,
                )
                hook["returncode"] = result.returncode
                hook["report"] = json.loads(result.stdout or b"{}")
                drained.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                assert await drained.process.wait() == 0, drained.log.read_text()
            if not dense:  # (dense: the negative controls, which count only the 503s before)
                await anyio.sleep(2.0)  # traffic goes on after the server is gone
            stop.set()
        if "--refuse-at-once" in flags:  # the negative control: the caller looks
            return statuses, drained
        failures = {key: count for key, count in statuses.items() if key != 200}
        assert failures == {}, (failures, drained.log.read_text())
        assert statuses[200] - before >= 3, statuses  # and it kept flowing after the drain
        assert streams and set(streams) == {"complete"}, streams
        stats = drained.exit_statistics()
        # served through the window until HAProxy had taken it out: nothing refused
        assert stats["rejected_while_draining"] == 0, stats
        assert stats["readiness_failed_after"] is not None and stats["readiness_failed_after"] < 3
        assert 0 <= stats["propagation_observed"] < 7, stats
        if hook:
            assert hook["returncode"] == 0, hook
            report = hook["report"]
            assert report["drained"], report
            assert report["propagation_observed"] == pytest.approx(
                stats["propagation_observed"], abs=0.01
            )
        return statuses, drained


async def test_sigterm_behind_haproxy_at_its_defaults_shows_clients_no_503(
    tmp_path: Path,
) -> None:
    """Issue 23: SIGTERM to one of two servers behind HAProxy at its defaults (2 s x 3), sparse
    traffic from keep-alive clients: every short request is 200, every stream complete. With
    nothing declared the window runs to its maximum (10 s), past HAProxy's 4-6 s."""
    _, drained = await _drain_under_traffic(tmp_path, "sigterm")
    stats = drained.exit_statistics()
    assert stats["window_close_reason"] == "max", stats


async def test_prestop_drain_declaring_haproxys_check_closes_once_it_is_out(
    tmp_path: Path,
) -> None:
    """The preStop drain command declaring HAProxy's check (2 s x 3): no 503, and the window
    closes once that check has certainly taken the server out (3 x 2 s + 1 s = 7 s), not at
    the first failed probe (issue 23: about 2 s, while HAProxy still sent requests)."""
    _, drained = await _drain_under_traffic(
        tmp_path, "drain-command", hook_flags=("--balancer-interval", "2s", "--balancer-fall", "3")
    )
    stats = drained.exit_statistics()
    assert stats["window_close_reason"] == "balancer-check", stats
    assert 7.0 <= stats["window_closed_after"] < 9.5, stats


async def test_tuned_haproxy_declared_closes_the_window_early(tmp_path: Path) -> None:
    """HAProxy tuned (inter 500ms, fall 1) and declared to the server: no 503, and the window
    closes about 1.5-3.5 s in (0.5 s + 1 s, then the quiet period after the last request)."""
    flags = ("--balancer-interval", "0.5s", "--balancer-fall", "1")
    _, drained = await _drain_under_traffic(
        tmp_path, "sigterm", *flags, check="inter 500 fall 1 rise 1"
    )
    stats = drained.exit_statistics()
    assert stats["window_close_reason"] == "balancer-check", stats
    assert 1.5 <= stats["window_closed_after"] < 5, stats


async def test_refusing_at_once_behind_haproxy_shows_clients_503s(tmp_path: Path) -> None:
    """The negative control: --refuse-at-once behind a balancer that does not retry answers 503
    to what HAProxy sends before it has taken the server out (4-6 s). Dense traffic: sparse, the
    server has nothing in flight, exits at once, and HAProxy's connect retry hides it."""
    statuses, drained = await _drain_under_traffic(
        tmp_path, "sigterm", "--refuse-at-once", dense=True
    )
    assert statuses[503] > 0, statuses
    assert drained.exit_statistics()["rejected_while_draining"] > 0
