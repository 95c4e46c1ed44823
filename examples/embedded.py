"""Embedding asyncdeploy in an application that owns its event loop (uvloop when installed).

    python examples/embedded.py [--driver docker|podman]

The application runs its own loop and its own work (here a heartbeat); asyncdeploy runs in it as
ordinary tasks: it installs no signal handlers and never starts a loop of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys

from _plan import example_plan

from asyncdeploy import open_deployer


async def heartbeat(beats: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        beats.append(loop.time())
        await asyncio.sleep(0.1)


async def application(driver: str | None) -> int:
    beats: list[float] = []
    pulse = asyncio.create_task(heartbeat(beats))
    try:
        async with open_deployer(driver) as deployer:
            plan = example_plan("example-embedded")
            await deployer.create(plan)
            summary = await deployer.delete(plan.name, grace_period_seconds=5)
    finally:
        pulse.cancel()
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    print(f"loop: {type(asyncio.get_running_loop()).__module__}")
    print(f"drained {len(summary.containers)} containers in {summary.seconds:.2f} s")
    print(
        f"the application's heartbeat kept beating: {len(beats)} beats, longest gap {max(gaps):.2f} s"
    )
    return 0 if max(gaps) < 0.5 else 1


def run(driver: str | None) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(application(driver))
    return uvloop.run(application(driver))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default=None)
    sys.exit(run(parser.parse_args().driver))
