"""One operation of the concurrent benchmark (``many.py``), in a process of its own so
that the same scenario can run this checkout's asyncdeploy or another's (``PYTHONPATH``).

    python many_worker.py ENGINE OP RUN_TAG N [GRACE]

OP: ``make`` (create N pods, not timed), ``terminate`` (N concurrent ``terminate()`` through
one deployer), ``delete-all`` (one ``terminate_all`` of them), ``create`` (N concurrent
``create()`` through one deployer). Prints one JSON object: wall seconds from the first call,
how each app container ended, each drain's SignalSent elapsed, and the engine HTTP requests
this process made (counted at aiohttp, so any version of the code is counted alike).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
import anyio

from asyncdeploy import Container, WorkloadPlan, open_deployer

BUSYBOX = "asyncdeploy-test/busybox:latest"
PAUSE = "asyncdeploy-test/pause:latest"
RUN_LABEL = "asyncdeploy-bench-run"
BENCH_LABEL = "asyncdeploy-bench"
# exits 1 s after SIGTERM (the shape: every container drains within a grace of 5)
DRAINS_1S = ["sh", "-c", "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done"]

REQUESTS: Counter[str] = Counter()
_original = aiohttp.ClientSession._request


async def _counted(self: aiohttp.ClientSession, method: str, url: Any, **kw: Any) -> Any:
    path = str(url).split("/", 3)[-1].split("?")[0]
    parts = [
        "{id}" if re.fullmatch(r"[0-9a-f]{12,}", p) else p
        for p in path.split("/")
        if p and not re.fullmatch(r"v[0-9.]+", p)
    ]
    REQUESTS[f"{method} {'/'.join(parts)}"] += 1  # e.g. POST containers/{id}/kill
    return await _original(self, method, url, **kw)


aiohttp.ClientSession._request = _counted  # type: ignore[method-assign]


def plan(name: str, tag: str, grace: int) -> WorkloadPlan:
    return WorkloadPlan(
        name=name,
        labels={BENCH_LABEL: "1", RUN_LABEL: tag},
        pause_image=PAUSE,
        containers=[Container(name="app", image=BUSYBOX, command=DRAINS_1S)],
        termination_grace_period_seconds=grace,
    )


async def main(engine: str, op: str, tag: str, n: int, grace: int) -> dict[str, Any]:
    names = [f"{tag}-{i:02d}" for i in range(n)]
    out: dict[str, Any] = {}
    async with open_deployer(engine) as deployer:
        REQUESTS.clear()
        started = time.perf_counter()
        if op == "make":
            limiter = anyio.CapacityLimiter(4)

            async def make(name: str) -> None:
                async with limiter:
                    await deployer.create(plan(name, tag, grace))

            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(make, name)
        elif op == "create":
            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(deployer.create, plan(name, tag, grace))
        else:
            signals: list[float] = []
            ends: Counter[str] = Counter()

            async def consume(events: Any) -> None:
                async for event in events:
                    kind = type(event).__name__
                    if kind == "SignalSent":
                        signals.append(event.elapsed)
                    elif kind == "DrainFinished":
                        for c in event.summary.containers:
                            ends[f"{c.outcome} {c.exit_code}"] += 1

            if op == "terminate":

                async def one(name: str) -> None:
                    async with deployer.terminate(name) as events:
                        await consume(events)

                async with anyio.create_task_group() as tg:
                    for name in names:
                        tg.start_soon(one, name)
            else:
                async with deployer.terminate_all({RUN_LABEL: tag}) as events:
                    await consume(events)
            out.update(signals=sorted(signals), ends=dict(ends))
        out["seconds"] = time.perf_counter() - started
        out["requests"] = dict(REQUESTS)
    return out


if __name__ == "__main__":
    engine, op, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    grace = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    result = anyio.run(main, engine, op, tag, n, grace)
    sys.stdout.write(json.dumps(result) + "\n")
