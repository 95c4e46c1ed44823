"""The drain gate's cost for gRPC (h2c), beside HAProxy alone speaking h2c both ways.

One stock gRPC server (``tests/images/grpc_engine.py``: grpcio, bytes in and out, ``Slow``
answering at once here) reached directly, through the gate (``--upstream-protocol h2c``: its
controller and the HAProxy it runs, every figure the whole process tree's) and through HAProxy
alone (``proto h2`` on its listener and its server); each stack once per round, rounds
interleaved, medians. The client is grpcio in its own process: 8 threads of unary calls on one
channel (one HTTP/2 connection, as gRPC clients hold it) for ``--seconds``. The figure is the
CPU each stack spends per call (its processes' CPU over the calls made), beside calls/s.

    python benchmarks/gate_grpc.py [--rounds 3] [--seconds 5] [--smoke]

Results in bench-results/bench-gate-grpc.json; docs/benchmarks.md has the last figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gate import HAPROXY_CONFIG, REPO, cpu_seconds, free_port, wait_port

ENGINE = REPO / "tests" / "images" / "grpc_engine.py"
#: HAProxy alone as gate.py runs it, speaking h2c on its listener and to its server
HAPROXY_H2 = HAPROXY_CONFIG.replace(
    "bind 127.0.0.1:{port}", "bind 127.0.0.1:{port} proto h2"
).replace("server engine 127.0.0.1:{upstream}", "server engine 127.0.0.1:{upstream} proto h2")

# the client: unary calls from THREADS threads on one channel until the time is up; prints the
# number of calls that ended OK (and fails on any other end)
CLIENT = r"""
import sys, threading, time, grpc
port, seconds, threads = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
call = channel.unary_unary("/asyncdeploy.test.Engine/Slow")
done, errors, lock = [0], [], threading.Lock()
end = time.monotonic() + seconds
def work():
    while time.monotonic() < end:
        try:
            assert call(b"x", timeout=10) == b"done:x"
        except Exception as exc:
            errors.append(repr(exc)); return
        with lock:
            done[0] += 1
workers = [threading.Thread(target=work) for _ in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(done[0], len(errors), errors[:1])
"""
THREADS = 8


def ready(port: int, timeout: float = 20.0) -> None:
    """Until one call through the stack ends OK (the gate binds its port before its HAProxy)."""
    deadline = time.monotonic() + timeout
    while True:
        probe = subprocess.run(
            [sys.executable, "-c", CLIENT, str(port), "0.2", "1"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        calls, failed, *_ = (probe.stdout or "0 1").split()
        if probe.returncode == 0 and int(calls) > 0 and failed == "0":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no gRPC answer through 127.0.0.1:{port}: {probe.stdout}")
        time.sleep(0.2)


def start(stack: str, upstream: int, scratch: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    if stack == "haproxy-h2":
        config = scratch / "haproxy.cfg"
        config.write_text(HAPROXY_H2.format(port=port, upstream=upstream))
        argv = ["haproxy", "-db", "-f", str(config)]
    else:
        argv = [sys.executable, "-m", "asyncdeploy.gate", "--listen", str(port),
                "--listen-host", "127.0.0.1", "--upstream", str(upstream),
                "--upstream-protocol", "h2c", "--ready-path", "", "--log-level", "WARNING"]  # fmt: skip
    process = subprocess.Popen(argv, cwd=REPO)
    wait_port(port)
    ready(port)
    return process, port


def measure(port: int, seconds: float, pids: dict[str, int]) -> dict[str, Any]:
    """Calls/s and each process tree's CPU per call under the client's load."""
    warm_up = [sys.executable, "-c", CLIENT, str(port), "1", str(THREADS)]
    subprocess.run(warm_up, capture_output=True, check=True)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(seconds), str(THREADS)],
        capture_output=True, text=True, check=True,
    ).stdout.split(maxsplit=2)  # fmt: skip
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    calls, failed = int(out[0]), int(out[1])
    return {
        "calls_per_second": calls / seconds,
        "failed": failed,
        "cpu_us_per_call": {
            name: 1e6 * (after[name]["total"] - before[name].get("total", 0.0)) / max(1, calls)
            for name in pids
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(REPO / "bench-results" / "bench-gate-grpc.json"))
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds = 1.0, 1
    if shutil.which("haproxy") is None:
        print(
            "gRPC gate bench: haproxy is not installed (ci/setup.sh installs it)", file=sys.stderr
        )
        return 1
    upstream = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(ENGINE), "--port", str(upstream), "--slow-ms", "0"]
    )
    stacks = ["gate", "haproxy-h2"]
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in ["direct", *stacks]}
    load = os.getloadavg()
    try:
        wait_port(upstream)
        ready(upstream)
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", file=sys.stderr)
            rounds["direct"].append(measure(upstream, args.seconds, {"engine": engine.pid}))
            for stack in stacks:
                with tempfile.TemporaryDirectory(prefix=f"bench-{stack}-") as scratch:
                    process, port = start(stack, upstream, Path(scratch))
                    try:
                        pids = {"engine": engine.pid, stack: process.pid}
                        rounds[stack].append(measure(port, args.seconds, pids))
                    finally:
                        process.kill()  # SIGTERM would drain, through the propagation window
                        process.wait(10)
    finally:
        engine.terminate()
        engine.wait(10)
    results: dict[str, Any] = {"load_average": load, "load_average_after": os.getloadavg()}
    print(
        f"\nload average {load} -> {results['load_average_after']}; medians of {args.rounds} "
        f"rounds; {THREADS} threads of unary calls on one channel"
    )
    print(f"{'':12} {'CPU/call':>9} {'calls/s':>8} {'engine CPU/call':>16} {'failed':>7}")
    for name, measured in rounds.items():
        proxy = name if name != "direct" else "engine"
        figures = {
            "calls_per_second": statistics.median(m["calls_per_second"] for m in measured),
            "cpu_us": statistics.median(m["cpu_us_per_call"][proxy] for m in measured),
            "engine_cpu_us": statistics.median(m["cpu_us_per_call"]["engine"] for m in measured),
            "failed": sum(m["failed"] for m in measured),
        }
        results[name] = figures
        cpu = f"{figures['cpu_us']:6.1f}us" if name != "direct" else ""
        print(
            f"{name:12} {cpu:>9} {figures['calls_per_second']:8.0f} "
            f"{figures['engine_cpu_us']:14.1f}us {figures['failed']:7d}"
        )
    ratio = results["gate"]["cpu_us"] / results["haproxy-h2"]["cpu_us"]
    results["gate_cpu_vs_haproxy_h2"] = round(ratio, 2)
    print(f"gate / HAProxy alone, CPU per call: {ratio:.2f}x")
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps({"rounds": rounds, **results}, indent=2))
    return 1 if any(results[n]["failed"] for n in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
