"""Consume a drain's events as they happen, matching on their types.

python examples/events.py [--driver docker|podman]
"""

from __future__ import annotations

import argparse
import sys
from typing import assert_never

import anyio
from _plan import example_plan

from asyncdeploy import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
    open_deployer,
)


def describe(event: DrainEvent) -> str:
    match event:
        case DrainStarted(grace_period_seconds=grace):
            return f"draining, every container must be gone within {grace} s"
        case SignalSent(container=name, signal=signal):
            return f"{name} got {signal}"
        case ContainerExited(container=name, exit_code=code, graceful=True):
            return f"{name} drained and exited with {code}"
        case ContainerExited(container=name, exit_code=code):
            return f"{name} was killed ({code})"
        case ContainerForceKilled(container=name):
            return f"{name} outlived the deadline"
        case PreStopStarted() | PreStopFinished() | SidecarRemoved():
            return f"{type(event).__name__} {event.container}"
        case ContainerRemoved(container=name) | PauseRemoved(container=name):
            return f"{name} removed"
        case DrainFinished(summary=summary):
            return f"done in {summary.seconds:.2f} s, {summary.count('exited')} drained"
        case _:
            assert_never(event)


async def main(driver: str | None) -> int:
    plan = example_plan("example-events")
    async with open_deployer(driver) as deployer:
        await deployer.create(plan)
        async with deployer.terminate(plan.name, grace_period_seconds=5) as events:
            async for event in events:
                print(f"{event.elapsed:6.2f}s  {describe(event)}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default=None)
    sys.exit(anyio.run(main, parser.parse_args().driver))
