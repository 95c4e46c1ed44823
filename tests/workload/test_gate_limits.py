"""One client cannot stall the gate or grow it without bound: the limits a real proxy has.

The gate runs as its own process (``python -m asyncdeploy.gate``, on ``--loop asyncio`` and on
``--loop uvloop``) in front of the stock engine, so its memory and descriptors are its own.
Before: pipelined ``GET /-/metrics`` written without reading the answers took the gate from
27 to 476 MB while another client's ``GET /short`` waited 5 x 10 s; 70 connections sending
half a head under a 64-descriptor limit left ``/short``, ``/ready`` and the drain unanswered
for 300 s."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import httpx
import pytest

from tests.polling import until
from tests.workload.test_gate_proxy import ENGINE, free_port
from tests.workload.test_haproxy import _ENV

pytestmark = pytest.mark.anyio
TOKEN = "limits-token"


@pytest.fixture(params=["asyncio", "uvloop"])
def loop(request: pytest.FixtureRequest) -> str:
    if request.param == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is in the test dependency group")
    return str(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine_port() -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--load-seconds", "0", "--short-ms", "0"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait(10)


class GateProcess:
    def __init__(self, process: anyio.abc.Process, port: int, admin: int) -> None:
        self.process, self.port, self.admin = process, port, admin
        self.url = f"http://127.0.0.1:{port}"

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024


@asynccontextmanager
async def gate_process(
    upstream: int, loop: str, *extra: str, descriptors: int | None = None
) -> AsyncIterator[GateProcess]:
    port, admin = free_port(), free_port()
    command = [
        sys.executable, "-m", "asyncdeploy.gate", "--listen-host", "127.0.0.1",
        "--listen", str(port), "--upstream", str(upstream), "--check-interval", "0.1",
        "--admin-port", str(admin), "--admin-host", "127.0.0.1", "--loop", loop, *extra,
    ]  # fmt: skip
    if descriptors is not None:  # the limit set in a small parent that then becomes the gate
        limit = f"resource.setrlimit(resource.RLIMIT_NOFILE, ({descriptors}, {descriptors}))"
        command = [
            sys.executable, "-c",
            f"import os, resource, sys; {limit}; os.execv(sys.argv[1], sys.argv[1:])",
            *command,
        ]  # fmt: skip
    process = await anyio.open_process(
        command,
        env={**_ENV, "ASYNCDEPLOY_GATE_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        gate = GateProcess(process, port, admin)
        async with httpx.AsyncClient() as client:

            async def ready() -> bool:
                try:
                    return (await client.get(f"{gate.url}/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await until(ready, timeout=30, interval=0.05)
        yield gate
    finally:
        with suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        await process.aclose()


async def answered_in(client: httpx.AsyncClient, url: str, seconds: float, **kw: object) -> int:
    """The status of GET ``url``; the test fails if no answer comes within ``seconds`` (a
    bound for a hang, not for speed: that is the benchmark's)."""
    with anyio.fail_after(seconds):
        return (await client.get(url, **kw)).status_code  # type: ignore[arg-type]


async def test_a_pipelined_metrics_flood_is_bounded_and_others_are_served(
    engine_port: int, loop: str
) -> None:
    """A client writes pipelined GET /-/metrics and never reads: the gate stops taking them
    once its answers wait unread (local answers under flow control), its memory stays flat,
    and another client's requests are answered at once."""
    flood = b"GET /-/metrics HTTP/1.1\r\nHost: g\r\n\r\n" * 20_000  # 0.7 MB a write
    async with gate_process(engine_port, loop) as gate:
        before = gate.rss_mb()
        sent = 0
        async with await anyio.connect_tcp("127.0.0.1", gate.port) as flooder:
            with anyio.move_on_after(4):  # the gate stops reading: the sends block
                for _ in range(60):
                    await flooder.send(flood)
                    sent += len(flood)
            async with httpx.AsyncClient() as other:
                for _ in range(5):  # answered while the flood is held unread: not behind it
                    assert await answered_in(other, f"{gate.url}/short", 10) == 200
            grown = gate.rss_mb() - before
        assert sent < 30 * len(flood)  # it did not take 42 MB of requests
        assert grown < 20, f"the gate grew by {grown:.1f} MB"


async def test_half_sent_heads_time_out_under_a_low_descriptor_limit(
    engine_port: int, loop: str
) -> None:
    """70 connections each send half a request head to a gate allowed 64 descriptors: past
    the data port's last slot they are closed at once, the ones it holds get 408 at the header
    timeout, and meanwhile the admin port's status is answered (its slots are its own), /ready
    answered or refused at once, and, once a slot is free, /short answered."""
    half = b"GET /short HTTP/1.1\r\nHost: g\r\nX-Slow: "
    async with (
        gate_process(engine_port, loop, "--header-timeout", "1s", descriptors=64) as gate,
        httpx.AsyncClient() as client,
    ):
        streams = []
        for _ in range(70):
            try:
                stream = await anyio.connect_tcp("127.0.0.1", gate.port)
            except OSError:
                continue
            streams.append(stream)
            try:
                await stream.send(half)
            except (anyio.BrokenResourceError, OSError):
                pass
        try:
            admin = f"http://127.0.0.1:{gate.admin}/-/status"
            headers = {"x-asyncdeploy-token": TOKEN}
            assert await answered_in(client, admin, 2, headers=headers) == 200
            try:
                assert await answered_in(client, f"{gate.url}/ready", 2) in (200, 503)
            except httpx.TransportError:
                pass  # closed at once: the data port was full (not left waiting)

            async def short_ok() -> bool:
                try:
                    return await answered_in(client, f"{gate.url}/short", 2) == 200
                except httpx.TransportError:
                    return False

            await until(short_ok, timeout=6, interval=0.1)
            # every half head was answered (503 past the cap, 408 at the timeout) or closed
            answers: list[bytes] = []
            with anyio.fail_after(10):
                for stream in streams:
                    received = b""
                    try:
                        while True:
                            received += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        pass
                    answers.append(received[:12])
            assert set(answers) <= {b"HTTP/1.1 503", b"HTTP/1.1 408", b""}, set(answers)
            assert b"HTTP/1.1 408" in answers
        finally:
            for stream in streams:
                await stream.aclose()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def test_haproxy_goes_with_its_controller_killed_outright(
    engine_port: int, loop: str
) -> None:
    """SIGKILL to the gate process (no drain, no cleanup): its HAProxy, in a session of its
    own, exits too (the kernel's parent-death signal) and frees the ports; before, it lived on
    as an orphan holding them."""
    async with gate_process(engine_port, loop) as gate:
        children = _haproxy_children(gate.process.pid)
        assert len(children) == 1
        gate.process.kill()
        await gate.process.wait()
        await until(lambda: not _alive(children[0]), timeout=10)


def _haproxy_children(parent: int) -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _ppid(p) == parent and "haproxy" in (p / "comm").read_text()
    ]


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return -1
