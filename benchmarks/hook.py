"""How soon a gated drain signals its engine: from the drain's start to the engine's SIGTERM.

    python benchmarks/hook.py [--cycles 8] [--engines docker,podman]

(``nox -s bench`` runs it.) The test suite's stock engine behind its gate (``gate:`` with a
window of 0 s and nothing in flight, so the gate's drain call answers at once), one workload
at a time, the ways of sending the gate's drain call interleaved cycle by cycle:

* **made ready beside the claim (default)** — the probe's exec in the gate container is
  started at the drain's start, and the call goes out when the drain asks for it;
* **a fresh exec when asked** — the same drain without that (what a drain did before);
* **from the deployer's host** — the call sent to the workload's address from here, as before
  checks and hooks ran inside the workload (rootful engines only: the address must be
  reachable);
* **no gate** — the same server with no hook: the stop signal alone (the floor).

Each row: the median seconds from ``DrainStarted`` to the engine's ``SignalSent``. The
engine's own gate and stock-engine images must be there (``ci/build-gate-image.sh``). Results:
a table on stdout and ``bench-results/bench-hook.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import socket
import statistics
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import anyio
from common import ENGINE_URLS

from asyncdeploy import Deployer, DrainStarted, SignalSent, WorkloadPlan, open_deployer
from asyncdeploy.builtin_images import GATE_IMAGE
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._inside import Inside

STOCK_IMAGE = "asyncdeploy-test/stock-engine:latest"
PAUSE = "asyncdeploy-test/pause:latest"
LABEL = {"asyncdeploy-bench": "1"}
WAYS = (
    "made ready beside the claim (default)",
    "a fresh exec when asked",
    "from the deployer's host",
    "no gate",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan(name: str, *, gated: bool) -> WorkloadPlan:
    engine: dict[str, Any] = {
        "name": "engine",
        "image": STOCK_IMAGE,
        "args": ["--port", "8001", "--load-seconds", "0"],
    }
    published = {"host_port": free_port(), "host_ip": "127.0.0.1"}
    if gated:
        engine["ports"] = [{"container_port": 8000, **published}]
        engine["gate"] = {
            "upstream": 8001,
            "ready": {"path": "/health"},
            "image": GATE_IMAGE,
            "propagation_seconds": 0,
        }
    else:
        engine["ports"] = [{"container_port": 8001, **published}]
        engine["checks"] = {"readiness": {"tcp": 8001, "period_seconds": 1}}
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": LABEL,
            "pause_image": PAUSE,
            "termination_grace_period_seconds": 20,
            "containers": [engine],
        }
    )


@contextlib.contextmanager
def sent(way: str) -> Iterator[None]:
    """The drain's code with the gate's drain call sent ``way`` (the default: as it is)."""
    saved = (EngineContainerOps.http_hooks_ahead, Inside.available)

    def nothing_ahead(self: Any, pause: Any, hooks: Sequence[Any]) -> Any:
        return contextlib.nullcontext()

    async def nothing_inside(self: Any, members: Any) -> bool:
        return False

    if way != WAYS[0]:
        EngineContainerOps.http_hooks_ahead = nothing_ahead  # type: ignore[method-assign]
    if way == WAYS[2]:
        Inside.available = nothing_inside  # type: ignore[method-assign]
    try:
        yield
    finally:
        EngineContainerOps.http_hooks_ahead, Inside.available = saved  # type: ignore[method-assign]


async def cycle(deployer: Deployer, way: str) -> float:
    name = f"bench-hook-{secrets.token_hex(3)}"
    await deployer.create(plan(name, gated=way != WAYS[3]))
    try:
        await deployer.wait_ready(name, timeout=90)
        started = signalled = float("nan")
        with sent(way):
            async with deployer.terminate(name) as drain:
                async for event in drain:
                    if isinstance(event, DrainStarted):
                        started = event.elapsed
                    elif isinstance(event, SignalSent) and event.container == "engine":
                        signalled = event.elapsed
        return signalled - started
    finally:
        with anyio.CancelScope(shield=True):
            await deployer.delete_all({"asyncdeploy-bench": "1"}, grace_period_seconds=0)


@contextlib.asynccontextmanager
async def opened(engine: str) -> AsyncIterator[Deployer]:
    async with open_deployer(engine, url=ENGINE_URLS[engine]) as deployer:  # type: ignore[call-overload]
        yield deployer


async def bench(engine: str, cycles: int) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}
    async with opened(engine) as deployer:
        for _ in range(cycles):
            for way in WAYS:
                rows.setdefault(way, []).append(await cycle(deployer, way))
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="2 cycles: a smoke run")
    parser.add_argument("--engines", default="docker,podman")
    parser.add_argument("--out", default="bench-results/bench-hook.json")
    args = parser.parse_args()
    cycles = 2 if args.quick else args.cycles
    result: dict[str, Any] = {"cycles": cycles, "engines": {}}
    for engine in filter(None, args.engines.split(",")):
        rows = await bench(engine, cycles)
        print(f"{engine}: drain start -> the engine's SIGTERM, median of {cycles} cycles")
        for way, values in rows.items():
            print(f"  {way:40} {statistics.median(values):7.3f} s")
        result["engines"][engine] = {k: statistics.median(v) for k, v in rows.items()}
    out = anyio.Path(args.out)
    await out.parent.mkdir(parents=True, exist_ok=True)
    await out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    anyio.run(main)
