"""The drain gate's cost beside HAProxy and nginx, in front of the same server, in one run.

    python benchmarks/gate.py [--seconds 5] [--rounds 5] [--streams 128] [--smoke]
                              [--stacks gate,haproxy,haproxy-close,nginx,gate-asyncio,relay-floor,uvicorn]

(``nox -s bench`` runs it.) The server is ``tests/images/stock_engine.py`` (stdlib asyncio, knows
nothing of the kit), one process on 127.0.0.1, reached directly and through each stack under
test, each in its own process, one at a time, in interleaved rounds (every stack once per
round, the rounds one after the other: a change of the machine's load falls on all of them):

* **gate**: ``python -m asyncdeploy.gate``: its controller (on uvloop when installed, ``--loop
  auto``: what the gate image runs) and the HAProxy it starts and drives (its data plane); every
  figure is the whole process tree's, the controller's included; **gate-asyncio** (on demand)
  the controller on asyncio's own loop;
* **haproxy**: Debian's HAProxy alone, one thread, keep-alive to the server (its defaults);
* **haproxy-close**: the same with the gate's rule for engine connections (``option
  http-server-close``: a fresh one per request, issue 30 item 4), so the gate's cost splits into
  that rule's and the controller's; **haproxy-nodelay** (on demand) with ``option
  http-no-delay``, for the per-token latency;
* **nginx**: Debian's nginx alone, one worker, upstream keep-alive, ``proxy_buffering off``
  (what SSE needs through nginx);
* **relay-floor** (on demand): the least any Python proxy on uvloop does: bytes from the client
  to the server and back in protocol callbacks, nothing parsed, counted or checked;
* **uvicorn** (on demand): an ASGI proxy under uvicorn with ``httpx``.

Figures, the median of the rounds:

* CPU time per short request of the stack's processes (utime + stime over a ``wrk -t2 -c16``
  run on ``GET /short``; the gate's controller and HAProxy added): the figure a shared machine
  moves least; goal (issue 30 item 7): the gate's <= 1.1x HAProxy's;
* requests/s under that load, and the p99 latency of ``wrk -t1 -c1`` (no queueing);
* per-token latency: ``--streams`` concurrent SSE streams at 20 tokens/s; each event carries the
  engine's send time, the client (another process) takes its arrival time; goal: the gate's
  p99 <= HAProxy's + 1 ms;
* peak resident memory (VmHWM) of the stack's processes, added (the gate: controller +
  HAProxy); goal: the whole gate's <= 60 MB.

``--smoke`` is a short run that shows the benchmark works; its figures mean little.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENGINE = REPO / "tests" / "images" / "stock_engine.py"
#: the gate on each event loop: uvloop when installed (what the gate image runs), asyncio's own
GATE_LOOPS = {"gate": "auto", "gate-asyncio": "asyncio", "gate-uvloop": "uvloop"}
#: issue 30 item 7's goals, against HAProxy's figures of the same round; the gate's figures are
#: its whole process tree's (the controller and the HAProxy it runs)
GOALS = {"cpu_vs_haproxy": 1.1, "token_p99_over_haproxy_ms": 1.0, "rss_mb": 60.0}

HAPROXY_CONFIG = """\
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend front
    bind 127.0.0.1:{port}
    default_backend engine
backend engine
    server engine 127.0.0.1:{upstream}
"""
#: HAProxy alone with the gate's rule for the engine's connections (issue 30 item 4: a fresh one
#: per request), to tell that rule's cost from the controller's
HAPROXY_CLOSE_CONFIG = HAPROXY_CONFIG + "    option http-server-close\n"
#: HAProxy alone with ``option http-no-delay`` (every chunk sent at once: no MSG_MORE, no Nagle
#: wait), for the per-token latency of SSE streams
HAPROXY_NODELAY_CONFIG = HAPROXY_CONFIG + "    option http-no-delay\n"

NGINX_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream engine {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""

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


_RELAY_FLOOR = r"""
import asyncio, sys, uvloop
UPSTREAM = int(sys.argv[2])
class Upstream(asyncio.Protocol):
    def __init__(self, client): self.client = client
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.client.transport.write(data)
class Client(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.upstream, self.early = transport, None, []
        asyncio.get_running_loop().create_task(self.open())
    async def open(self):
        loop = asyncio.get_running_loop()
        _, self.upstream = await loop.create_connection(lambda: Upstream(self), "127.0.0.1", UPSTREAM)
        for data in self.early: self.upstream.transport.write(data)
    def data_received(self, data):
        if self.upstream is None: self.early.append(data)
        else: self.upstream.transport.write(data)
async def main():
    server = await asyncio.get_running_loop().create_server(Client, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
uvloop.run(main())
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


# a small POST (what an inference call is: a gate gives it an engine connection of its own)
_POST_SCRIPT = 'wrk.method = "POST"\nwrk.body = "x"\nwrk.headers["Content-Type"] = "text/plain"\n'


def wrk(
    port: int, seconds: float, threads: int, connections: int, *, post: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as scratch:
        path, script = "/short", []
        if post:
            lua = Path(scratch) / "post.lua"
            lua.write_text(_POST_SCRIPT)
            path, script = "/echo", ["-s", str(lua)]
        out = subprocess.run(
            ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s",
             "--latency", *script, f"http://127.0.0.1:{port}{path}"],
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


HAPROXY_CONFIGS = {
    "haproxy": HAPROXY_CONFIG,
    "haproxy-close": HAPROXY_CLOSE_CONFIG,
    "haproxy-nodelay": HAPROXY_NODELAY_CONFIG,
}


def start_stack(stack: str, upstream: int, scratch: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    if stack in HAPROXY_CONFIGS:
        config = scratch / "haproxy.cfg"
        template = HAPROXY_CONFIGS[stack]
        config.write_text(template.format(port=port, upstream=upstream))
        argv = ["haproxy", "-db", "-f", str(config)]
    elif stack == "nginx":
        config = scratch / "nginx.conf"
        config.write_text(NGINX_CONFIG.format(port=port, upstream=upstream, dir=scratch))
        argv = ["nginx", "-c", str(config), "-e", str(scratch / "error.log")]
    elif stack == "relay-floor":
        argv = [sys.executable, "-c", _RELAY_FLOOR, str(port), str(upstream)]
    elif stack in GATE_LOOPS:
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
    wait_answering(port)
    return process, port


def wait_answering(port: int, timeout: float = 20.0) -> None:
    """Until ``GET /short`` through the stack is a 200 (the gate binds its port before its
    HAProxy is up)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/short", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing answers on {port}")
        time.sleep(0.05)


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the gate's: the controller and its HAProxy)."""
    found, todo = [], [pid]
    while todo:
        one = todo.pop()
        found.append(one)
        for task in Path(f"/proc/{one}/task").iterdir():
            children = (task / "children").read_text().split()
            todo.extend(int(c) for c in children)
    return found


def cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of ``pid`` and of every process under it (alive at the reading), by
    process name, and their sum (``total``)."""
    out: dict[str, float] = {}
    for one in tree(pid):
        name = Path(f"/proc/{one}/comm").read_text().strip()
        fields = Path(f"/proc/{one}/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])
        out[name] = out.get(name, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    out["total"] = sum(out.values())
    return out


def peak_rss_tree_mb(pid: int) -> dict[str, float]:
    """Each process's peak RSS (VmHWM) by name, and their sum (``total``: an upper bound of the
    tree's peak, each process's peak added)."""
    out: dict[str, float] = {}
    for one in tree(pid):
        name = Path(f"/proc/{one}/comm").read_text().strip()
        out[name] = out.get(name, 0.0) + peak_rss_mb(one)
    out["total"] = sum(out.values())
    return out


def measure(port: int, args: argparse.Namespace, pids: dict[str, int]) -> dict[str, Any]:
    """The three figures; the CPU each process spent per short request under load is the
    measure a loaded machine moves least (time on the CPU, not time waiting for one)."""
    wrk(port, 1, 2, 16)  # warm-up
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    load = wrk(port, args.seconds, 2, 16)
    requests = load["rps"] * max(1, round(args.seconds))
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    by_process = {
        name: {
            process: round(1e6 * (seconds - before[name].get(process, 0.0)) / requests, 1)
            for process, seconds in after[name].items()
        }
        for name in pids
    }
    load["cpu_us_per_request"] = {name: spent["total"] for name, spent in by_process.items()}
    load["cpu_us_by_process"] = by_process
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    posts = wrk(port, args.seconds, 2, 16, post=True)
    requests = posts["rps"] * max(1, round(args.seconds))
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    posts["cpu_us_per_request"] = {
        name: round(1e6 * (after[name]["total"] - before[name].get("total", 0.0)) / requests, 1)
        for name in pids
    }
    return {
        "load": load,
        "posts": posts,
        "single": wrk(port, args.seconds, 1, 1),
        "streams": streams(port, args.streams, args.tokens),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=60, help="per stream (20/s: 3 s)")
    parser.add_argument("--stacks", default="gate,haproxy,haproxy-close,nginx")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(REPO / "bench-results" / "bench-gate.json"))
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.streams, args.tokens, args.rounds = 1.0, 16, 10, 1
    stacks = args.stacks.split(",")
    for tool in ["wrk", *{s.split("-")[0] for s in stacks if s.startswith(("haproxy", "nginx"))}]:
        if shutil.which(tool) is None:
            print(f"gate bench: {tool} is not installed (ci/setup.sh installs it)", file=sys.stderr)
            return 1
    upstream = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(ENGINE), "--port", str(upstream), "--host", "127.0.0.1",
         "--load-seconds", "0", "--short-ms", "0"]
    )  # fmt: skip
    results: dict[str, Any] = {"load_average": os.getloadavg(), "cpus": os.cpu_count()}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in ["direct", *stacks]}
    try:
        wait_port(upstream)
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", file=sys.stderr)
            rounds["direct"].append(measure(upstream, args, {"engine": engine.pid}))
            for stack in stacks:
                with tempfile.TemporaryDirectory(prefix=f"bench-{stack}-") as scratch:
                    process, port = start_stack(stack, upstream, Path(scratch))
                    try:
                        figures = measure(port, args, {"engine": engine.pid, stack: process.pid})
                        by_process = peak_rss_tree_mb(process.pid)
                        figures["rss_mb"] = by_process["total"]
                        figures["rss_by_process_mb"] = by_process
                        rounds[stack].append(figures)
                    finally:
                        process.kill()  # SIGTERM would drain, through the propagation window
                        process.wait(10)
    finally:
        engine.terminate()
        engine.wait(10)
    results["load_average_after"] = os.getloadavg()
    results["rounds"] = rounds
    for name, measured in rounds.items():
        results[name] = median_figures(measured, name)
    report(results, stacks)
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


def median_figures(measured: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Each figure's median over the rounds."""

    def median(path: tuple[str, ...]) -> float:
        values = []
        for figures in measured:
            value: Any = figures
            for key in path:
                value = value[key]
            values.append(float(value))
        return statistics.median(values)

    proxy = name if name != "direct" else "engine"
    out: dict[str, Any] = {
        "rps": median(("load", "rps")),
        "p99_ms": median(("single", "p99_ms")),
        "token_p99_ms": median(("streams", "p99_ms")),
        "token_p50_ms": median(("streams", "p50_ms")),
        "streams_complete": min(f["streams"]["complete"] for f in measured),
        "cpu_us": median(("load", "cpu_us_per_request", proxy)),
        "post_cpu_us": median(("posts", "cpu_us_per_request", proxy)),
        "engine_cpu_us": median(("load", "cpu_us_per_request", "engine")),
        "errors": [e for f in measured for e in f["load"]["errors"] + f["posts"]["errors"]],
    }
    if name != "direct":
        out["cpu_us_by_process"] = {
            process: median(("load", "cpu_us_by_process", proxy, process))
            for process in measured[0]["load"]["cpu_us_by_process"][proxy]
        }
        out["rss_mb"] = median(("rss_mb",))
        out["rss_by_process_mb"] = {
            process: median(("rss_by_process_mb", process))
            for process in measured[0]["rss_by_process_mb"]
        }
    return out


def report(results: dict[str, Any], stacks: list[str]) -> None:
    direct = results["direct"]
    print(
        f"\nload average {results['load_average']} -> {results['load_average_after']}, "
        f"{results['cpus']} CPUs; medians of {len(results['rounds']['direct'])} rounds"
    )
    print(
        f"{'':14} {'CPU/req':>8} {'POST CPU':>9} {'req/s':>8} {'p99 c=1':>9} {'token p99':>10} "
        f"{'added':>8} {'RSS':>7} {'engine CPU/req':>15}"
    )
    for name in ["direct", *stacks]:
        r = results[name]
        added = r["token_p99_ms"] - direct["token_p99_ms"]
        rss = f"{r['rss_mb']:5.1f}MB" if "rss_mb" in r else ""
        if len(r.get("rss_by_process_mb", {})) > 2:  # more than one process and the total
            print(
                f"{'':14} by process: CPU/req {r['cpu_us_by_process']}, RSS {r['rss_by_process_mb']}"
            )
        cpu = f"{r['cpu_us']:6.1f}us" if name != "direct" else ""
        post = f"{r['post_cpu_us']:6.1f}us" if name != "direct" else ""
        print(
            f"{name:14} {cpu:>8} {post:>9} {r['rps']:8.0f} {r['p99_ms']:7.2f}ms "
            f"{r['token_p99_ms']:8.2f}ms {added:6.2f}ms {rss:>7} {r['engine_cpu_us']:13.1f}us"
        )
    haproxy = results.get("haproxy")
    for name in stacks:
        if not name.startswith("gate") or haproxy is None:
            continue
        r = results[name]
        cpu_ratio = r["cpu_us"] / haproxy["cpu_us"]
        token_over = r["token_p99_ms"] - haproxy["token_p99_ms"]
        r["verdict"] = {
            "cpu_vs_haproxy": [round(cpu_ratio, 2), cpu_ratio <= GOALS["cpu_vs_haproxy"]],
            "token_p99_over_haproxy_ms": [
                round(token_over, 2),
                token_over <= GOALS["token_p99_over_haproxy_ms"],
            ],
            "rss_mb": [round(r["rss_mb"], 1), r["rss_mb"] <= GOALS["rss_mb"]],
            # not a goal of its own: the price of never replaying a POST (its own connection)
            "post_cpu_vs_haproxy": round(r["post_cpu_us"] / haproxy["post_cpu_us"], 2),
        }
        print(f"{name:14} goals (issue 30 item 7): {r['verdict']}")
    errors = {n: results[n]["errors"] for n in ["direct", *stacks] if results[n]["errors"]}
    if errors:
        print(f"{'':14} errors: {errors}")


if __name__ == "__main__":
    sys.exit(main())
