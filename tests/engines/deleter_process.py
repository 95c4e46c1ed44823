"""One deleter process of the many-deleters test (``test_drain_many.py``): it opens a deployer,
prints ``ready``, waits for ``go`` on stdin (so that the processes' start-up, imports and all,
is not what runs at once), then drains every workload the selector matches, printing each event
as a JSON line, and exits 0 (1 when the drain raised).

    python -m tests.engines.deleter_process DRIVER KEY=VALUE
"""

from __future__ import annotations

import json
import sys

import anyio

from asyncdeploy import AsyncDeployError, open_deployer
from asyncdeploy._events import event_to_dict


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(driver: str, selector: str) -> int:
    key, _, value = selector.partition("=")
    async with open_deployer(driver) as deployer:
        say("ready")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            async with deployer.terminate_all({key: value}) as events:
                async for event in events:
                    say(json.dumps(event_to_dict(event)))
        except AsyncDeployError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, *sys.argv[1:3]))
