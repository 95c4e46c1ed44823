"""The drain gate's cost, side by side with the same server reached directly, in one run.

    python benchmarks/gate.py [--seconds 5] [--streams 128] [--smoke] [--stacks gate,gate-asyncio,uvicorn]

(``nox -s bench`` runs it.) The server is ``tests/images/stock_engine.py`` (stdlib asyncio, knows
nothing of the kit), one process on 127.0.0.1; in front of it, each stack under test in its own
process:

* **gate**: ``python -m asyncdeploy.gate`` (asyncio protocols, the gate's own parser) on uvloop
  when installed (``--loop auto``: what the gate image runs); **gate-asyncio** the same on
  asyncio's own loop (``--loop asyncio``); **gate-uvloop** insists on uvloop;
* **uvicorn+httpx**: the obvious alternative, an ASGI proxy (``_asgi_proxy`` below) under
  uvicorn with an ``httpx.AsyncClient`` to the engine: measured to choose the gate's stack.

Figures (goals from issue 15 item 7):

* short requests: ``wrk -t2 -c16`` on ``GET /short`` (the engine answers at once): requests/s,
  direct and through the stack (goal >= 0.8x direct); p99 latency of ``wrk -t1 -c1`` (no
  queueing), added to direct's (goal <= 2 ms);
* per-token latency: ``--streams`` concurrent SSE streams at 20 tokens/s; each event carries the
  engine's send time, the client (another process) takes its arrival time; the added p99 is
  stack p99 minus direct p99 (goal <= 5 ms);
* the stack's peak resident memory after all of it (VmHWM; goal <= 60 MB);
* CPU time per short request of the engine and of the stack (utime + stime over the wrk run):
  on a machine whose cores are shared the latency figures move with the load, this one much
  less. With a core each, the stack's capacity is 1 / its CPU per request.

The machine's load moves these figures; the run prints its load average. ``--smoke`` is a short
run that shows the benchmark works; its figures mean little.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENGINE = REPO / "tests" / "images" / "stock_engine.py"
#: the gate on each event loop: uvloop when installed (what the gate image runs), asyncio's own
GATE_LOOPS = {"gate": "auto", "gate-asyncio": "asyncio", "gate-uvloop": "uvloop"}
GOALS = {"throughput_ratio": 0.8, "added_p99_ms": 2.0, "added_token_p99_ms": 5.0, "rss_mb": 60.0}

_ASGI_PROXY = r"""
import sys, httpx
UPSTREAM = sys.argv[1]
HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"host"}
client = httpx.AsyncClient(base_url=UPSTREAM, timeout=None,
                           limits=httpx.Limits(max_connections=None, max_keepalive_connections=512))
async def app(scope, receive, send):
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        return
    async def body():
        while True:
            message = await receive()
            yield message.get("body", b"")
            if not message.get("more_body"):
                return
    path = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
    headers = [(k, v) for k, v in scope["headers"] if k not in HOP]
    request = client.build_request(scope["method"], path.decode(), headers=headers,
                                   content=body() if scope["method"] in ("POST", "PUT") else None)
    response = await client.send(request, stream=True)
    try:
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in HOP]})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await response.aclose()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def peak_rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


_WRK_LAT = re.compile(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_WRK_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_ERR = re.compile(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)")
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk(port: int, seconds: float, threads: int, connections: int) -> dict[str, Any]:
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency",
         f"http://127.0.0.1:{port}/short"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    latency = _WRK_LAT.search(out)
    rps = _WRK_RPS.search(out)
    assert latency and rps, out
    return {
        "rps": float(rps.group(1)),
        "p99_ms": float(latency.group(1)) * _UNIT[latency.group(2)],
        "errors": [m.group(0) for m in _WRK_ERR.finditer(out)],
    }


async def _one_stream(port: int, tokens: int, delays: list[float]) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /stream?tokens={tokens}&ms=50 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            .encode()
        )  # fmt: skip
        await writer.drain()
        seen = 0
        while True:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"data: {"):
                now = time.time()
                delays.append(now - json.loads(line[6:])["t"])
                seen += 1
            elif line.startswith(b"data: [DONE]"):
                break
        return seen == tokens
    finally:
        writer.close()


async def _streams(port: int, streams: int, tokens: int) -> dict[str, Any]:
    delays: list[float] = []
    results = await asyncio.gather(*(_one_stream(port, tokens, delays) for _ in range(streams)))
    delays.sort()
    return {
        "complete": sum(results),
        "tokens": len(delays),
        "p50_ms": 1000 * delays[len(delays) // 2],
        "p99_ms": 1000 * delays[int(len(delays) * 0.99)],
    }


def streams(port: int, count: int, tokens: int) -> dict[str, Any]:
    """In a child process, so the client's CPU is not the measured process's."""
    code = (
        "import asyncio, json, sys; sys.path.insert(0, sys.argv[1]); import gate as g;"
        "print(json.dumps(asyncio.run(g._streams(*map(int, sys.argv[2:])))))"
    )
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here, str(port), str(count), str(tokens)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(json.loads(out))


def start_stack(stack: str, upstream: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    if stack in GATE_LOOPS:
        argv = [sys.executable, "-m", "asyncdeploy.gate", "--listen", str(port),
                "--listen-host", "127.0.0.1", "--upstream", str(upstream), "--log-level", "WARNING",
                "--loop", GATE_LOOPS[stack]]  # fmt: skip
    else:
        script = Path("/tmp") / f"asgi-proxy-{os.getpid()}.py"
        script.write_text(_ASGI_PROXY)
        code = (
            "import sys, runpy, uvicorn; sys.argv = ['p', sys.argv[1]];"
            f"m = runpy.run_path({str(script)!r});"
            f"uvicorn.run(m['app'], host='127.0.0.1', port={port}, log_level='warning',"
            " lifespan='off', access_log=False)"
        )
        argv = [sys.executable, "-c", code, f"http://127.0.0.1:{upstream}"]
    process = subprocess.Popen(argv, cwd=REPO)
    wait_port(port)
    return process, port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def measure(port: int, args: argparse.Namespace, pids: dict[str, int]) -> dict[str, Any]:
    """The three figures; the CPU each process spent per short request under load is the
    measure a loaded machine moves least (time on the CPU, not time waiting for one)."""
    wrk(port, 1, 2, 16)  # warm-up
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    load = wrk(port, args.seconds, 2, 16)
    requests = load["rps"] * max(1, round(args.seconds))
    load["cpu_us_per_request"] = {
        name: round(1e6 * (cpu_seconds(pid) - before[name]) / requests, 1)
        for name, pid in pids.items()
    }
    return {
        "load": load,
        "single": wrk(port, args.seconds, 1, 1),
        "streams": streams(port, args.streams, args.tokens),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=60, help="per stream (20/s: 3 s)")
    parser.add_argument("--stacks", default="gate,gate-asyncio,uvicorn")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(REPO / "bench-results" / "bench-gate.json"))
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.streams, args.tokens = 1.0, 16, 10
    if shutil.which("wrk") is None:
        print("gate bench: wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 1
    upstream = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(ENGINE), "--port", str(upstream), "--host", "127.0.0.1",
         "--load-seconds", "0", "--short-ms", "0"]
    )  # fmt: skip
    results: dict[str, Any] = {"load_average": os.getloadavg(), "cpus": os.cpu_count()}
    try:
        wait_port(upstream)
        results["direct"] = measure(upstream, args, {"engine": engine.pid})
        for stack in args.stacks.split(","):
            process, port = start_stack(stack, upstream)
            try:
                results[stack] = measure(port, args, {"engine": engine.pid, stack: process.pid})
                results[stack]["rss_mb"] = peak_rss_mb(process.pid)
            finally:
                process.kill()  # SIGTERM would drain, through the kit's propagation window
                process.wait(10)
    finally:
        engine.terminate()
        engine.wait(10)
    report(results, args.stacks.split(","))
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


def report(results: dict[str, Any], stacks: list[str]) -> None:
    direct = results["direct"]
    print(f"\nload average {results['load_average']}, {results['cpus']} CPUs")
    print(f"{'':16} {'req/s':>9} {'x direct':>9} {'p99 c=1':>9} {'added':>8} "
          f"{'token p99':>10} {'added':>8} {'streams ok':>11} {'RSS MB':>7}")  # fmt: skip
    rows = [("direct", direct), *((s, results[s]) for s in stacks)]
    for name, r in rows:
        ratio = r["load"]["rps"] / direct["load"]["rps"]
        added = r["single"]["p99_ms"] - direct["single"]["p99_ms"]
        token_added = r["streams"]["p99_ms"] - direct["streams"]["p99_ms"]
        rss = r.get("rss_mb")
        print(
            f"{name:16} {r['load']['rps']:9.0f} {ratio:9.2f} {r['single']['p99_ms']:8.2f}ms "
            f"{added:7.2f}ms {r['streams']['p99_ms']:9.2f}ms {token_added:7.2f}ms "
            f"{r['streams']['complete']:>5}/{len(str(r['streams']['complete'])) and ''}"
            f"{'':<5} {'' if rss is None else f'{rss:7.1f}'}"
        )
        if name != "direct":
            r["verdict"] = {
                "throughput_ratio": [round(ratio, 3), ratio >= GOALS["throughput_ratio"]],
                "added_p99_ms": [round(added, 3), added <= GOALS["added_p99_ms"]],
                "added_token_p99_ms": [
                    round(token_added, 3),
                    token_added <= GOALS["added_token_p99_ms"],
                ],
                "rss_mb": [round(rss or 0, 1), (rss or 0) <= GOALS["rss_mb"]],
            }
            print(f"{'':16} goals: {r['verdict']}")
    print(f"{'':16} errors: " + "; ".join(f"{n}: {r['load']['errors']}" for n, r in rows))
    print(
        f"{'':16} CPU per short request (us): "
        + "; ".join(f"{n}: {r['load']['cpu_us_per_request']}" for n, r in rows)
    )


if __name__ == "__main__":
    sys.exit(main())
