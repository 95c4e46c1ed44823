"""Behind a stock HAProxy that does not retry, an unmodified server drained by its gate shows
clients no 503.

Two stock servers (tests/images/stock_engine.py: no kit, exits at once on SIGTERM), each behind
its own gate process, behind Debian's ``haproxy`` at its check defaults (``GET /ready``, ``inter
2s fall 3``, no ``retry-on``); sparse short requests and streams from keep-alive clients through
it; one pair is stopped the way a delete does it: the gate's drain (the engine's preStop), the
engine's SIGTERM, then the gate's. With the kit's propagation window nothing fails; refusing at
once (``--propagation-wait 0``, the negative control) shows clients the 503s a balancer sends
before it has taken the server out.
"""

from __future__ import annotations

import json
import re
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
from anyio.abc import Process

from tests.polling import until
from tests.workload.test_haproxy import (
    _ENV,
    SHORT_EVERY,
    STREAM_PAUSE,
    _short_requests,
    free_port,
    haproxy,
)
from tests.workload.test_haproxy import pytestmark as haproxy_marks

pytestmark = haproxy_marks
ENGINE = Path(__file__).parents[1] / "images" / "stock_engine.py"


class Pair:
    def __init__(self, engine: Process, gate: Process, port: int, admin: int, log: Path) -> None:
        self.engine, self.gate, self.port, self.admin, self.log = engine, gate, port, admin, log


@asynccontextmanager
async def gated_engine(directory: Path, window: str) -> AsyncIterator[Pair]:
    await anyio.Path(directory).mkdir()
    upstream, port, admin, log = free_port(), free_port(), free_port(), directory / "gate.log"
    engine = await anyio.open_process(
        [sys.executable, str(ENGINE), "--host", "127.0.0.1", "--port", str(upstream),
         "--load-seconds", "0.5", "--short-ms", "2", "--token-ms", "100"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    with log.open("wb") as out:
        gate = await anyio.open_process(
            [sys.executable, "-m", "asyncdeploy.gate", "--listen-host", "127.0.0.1",
             "--listen", str(port), "--upstream", str(upstream), "--check-interval", "0.2",
             "--admin-port", str(admin),
             "--drain-timeout", "20s", "--propagation-wait", window],
            stdout=out, stderr=subprocess.STDOUT, env=_ENV,
        )  # fmt: skip
    try:
        yield Pair(engine, gate, port, admin, log)
    finally:
        for process in (gate, engine):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


async def _streams(base: str, stop: anyio.Event, results: list[str], pause: float) -> None:
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as client:
        while not stop.is_set():
            if results:
                with anyio.move_on_after(pause):
                    await stop.wait()
                if stop.is_set():
                    break
            tokens, done = 0, False
            try:
                async with client.stream("GET", "/stream?tokens=20&ms=100") as response:
                    if response.status_code != 200:
                        results.append(f"status {response.status_code}")
                        continue
                    async for line in response.aiter_lines():
                        tokens += line.startswith("data: {")
                        done = done or line == "data: [DONE]"
            except httpx.HTTPError as exc:
                results.append(f"broken after {tokens}: {exc!r}")
                continue
            results.append("complete" if (tokens, done) == (20, True) else f"cut at {tokens}")


async def _stop_one_under_traffic(tmp_path: Path, window: str, *, dense: bool = False) -> tuple[Counter[Any], list[str], dict[str, Any]]:  # fmt: skip
    async with (
        gated_engine(tmp_path / "a", window) as drained,
        gated_engine(tmp_path / "b", window) as survivor,
        haproxy(tmp_path, [drained, survivor]) as base,  # type: ignore[list-item]
    ):
        statuses: Counter[Any] = Counter()
        streams: list[str] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            for _ in range(6 if dense else 1):  # dense: back to back; else the sparse traffic
                tg.start_soon(_short_requests, base, stop, statuses, 0 if dense else SHORT_EVERY)
            for _ in range(2 if dense else 1):
                tg.start_soon(_streams, base, stop, streams, 0 if dense else STREAM_PAUSE)
            await until(lambda: statuses[200] >= 2, timeout=30)  # flowing; a first stream open
            await anyio.sleep(0.5)  # (a loaded machine starts slowly)
            # what a delete does: the engine's preStop (the gate's drain), its SIGTERM, the gate's
            hook = await anyio.run_process(
                [sys.executable, "-m", "asyncdeploy.gate", "drain", "--port", str(drained.admin),
                 "--timeout", "25s"],
                env=_ENV, check=False,
            )  # fmt: skip
            drained.engine.send_signal(signal.SIGTERM)
            await drained.engine.wait()
            drained.gate.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                assert await drained.gate.wait() == 0, drained.log.read_text()
            if not dense:  # (dense: the negative control, which counts only the 503s before)
                await anyio.sleep(2.0)  # traffic goes on after the pair is gone
            stop.set()
        report = json.loads(hook.stdout or b"{}")
        report["returncode"] = hook.returncode
        return statuses, streams, report


async def test_a_stock_server_behind_its_gate_and_haproxy_at_its_defaults_shows_clients_no_503(
    tmp_path: Path,
) -> None:
    """Issue 23: HAProxy at its defaults (out 4-6 s after the drain), sparse traffic from
    keep-alive clients: nothing refused; nothing declared, so the window runs to its 10 s."""
    statuses, streams, report = await _stop_one_under_traffic(tmp_path, "10s")
    failures = {key: count for key, count in statuses.items() if key != 200}
    assert failures == {}, (failures, report)
    assert streams and set(streams) == {"complete"}, streams
    assert report["returncode"] == 0 and report["drained"] is True, report
    window = report["statistics"]
    assert window["rejected_while_draining"] == 0, window
    assert window["window_close_reason"] == "max", window  # no evidence was declared
    assert re.search(r"\d", str(window["propagation_observed"])), window


async def test_refusing_at_once_behind_haproxy_shows_clients_503s(tmp_path: Path) -> None:
    """The negative control: no window, and HAProxy sends requests the gate refuses."""
    statuses, streams, _ = await _stop_one_under_traffic(tmp_path, "0", dense=True)
    assert statuses[503] > 0, statuses
    # admitted streams still end whole; only new ones may be refused
    assert "complete" in streams and set(streams) <= {"complete", "status 503"}, streams
