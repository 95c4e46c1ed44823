"""Create → ready → delete through one deployer, with and without the settle wait, beside the
engine's CLI.

    python benchmarks/ready.py [--cycles 10] [--engines docker,podman]

(``nox -s bench`` runs it.) A server without a readiness check (``sleep``), grace 0, one cycle
after the other, interleaved round by round:

* **asyncdeploy, settle 2 s (default)** — ``create``, ``wait_ready``, ``delete``: the default
  rule catches a server that dies within 2 s of its start, and costs those 2 s;
* **asyncdeploy, settle 0** — ``wait_ready(settle_seconds=0)``: running is enough;
* **asyncdeploy, readiness check** — the same server with an exec readiness check (``true``);
* **docker run -d / rm -f** (``podman`` likewise): a plain container, no pause container, no
  check — the engine's own floor.

Each row: the median seconds per cycle. Results: a table on stdout and
``bench-results/bench-ready.json``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import subprocess
import time
from typing import Any

import anyio
from common import ENGINE_URLS

from asyncdeploy import Checks, Container, Deployer, Probe, WorkloadPlan, open_deployer

IMAGE = "asyncdeploy-test/busybox:latest"
PAUSE = "asyncdeploy-test/pause:latest"
LABEL = {"asyncdeploy-bench": "1"}


def plan(name: str, *, checked: bool) -> WorkloadPlan:
    checks = Checks(readiness=Probe(exec=["true"], period_seconds=1)) if checked else Checks()
    server = Container(name="server", image=IMAGE, command=["sleep", "3600"], checks=checks)
    return WorkloadPlan(
        name=name,
        labels=LABEL,
        pause_image=PAUSE,
        termination_grace_period_seconds=0,
        containers=[server],
    )


async def cycle(deployer: Deployer, *, settle: float | None, checked: bool) -> float:
    name = f"bench-ready-{secrets.token_hex(3)}"
    started = time.perf_counter()
    await deployer.create(plan(name, checked=checked))
    await deployer.wait_ready(name, timeout=60, settle_seconds=settle)
    await deployer.delete(name, grace_period_seconds=0)
    return time.perf_counter() - started


def cli_cycle(engine: str) -> float:
    name = f"bench-ready-{secrets.token_hex(3)}"
    started = time.perf_counter()
    run = [engine, "run", "-d", "--name", name, "--label", "asyncdeploy-bench=1", IMAGE]
    subprocess.run([*run, "sleep", "3600"], capture_output=True, check=True)
    subprocess.run([engine, "rm", "-f", name], capture_output=True, check=True)
    return time.perf_counter() - started


async def bench(engine: str, cycles: int) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}
    async with open_deployer(engine, url=ENGINE_URLS[engine]) as deployer:  # type: ignore[call-overload]
        for _ in range(cycles):
            for label, settle, checked in (
                ("asyncdeploy, settle 2 s (default)", None, False),
                ("asyncdeploy, settle 0", 0.0, False),
                ("asyncdeploy, readiness check", None, True),
            ):
                rows.setdefault(label, []).append(
                    await cycle(deployer, settle=settle, checked=checked)
                )
            if shutil.which(engine):
                seconds = await anyio.to_thread.run_sync(cli_cycle, engine)
                rows.setdefault(f"{engine} run -d / rm -f", []).append(seconds)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 cycles: a smoke run")
    parser.add_argument("--engines", default="docker,podman")
    parser.add_argument("--out", default="bench-results/bench-ready.json")
    args = parser.parse_args()
    cycles = 3 if args.quick else args.cycles
    result: dict[str, Any] = {"cycles": cycles, "engines": {}}
    for engine in filter(None, args.engines.split(",")):
        rows = await bench(engine, cycles)
        print(f"{engine}: create -> ready -> delete, median of {cycles} cycles")
        floor = statistics.median(rows.get(f"{engine} run -d / rm -f") or [float("nan")])
        for label, values in rows.items():
            median = statistics.median(values)
            print(f"  {label:40} {median:7.3f} s  {median / floor:5.1f}x the CLI")
        result["engines"][engine] = {k: statistics.median(v) for k, v in rows.items()}
    out = anyio.Path(args.out)
    await out.parent.mkdir(parents=True, exist_ok=True)
    await out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    anyio.run(main)
