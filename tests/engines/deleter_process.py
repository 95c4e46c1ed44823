"""One deleter process of the many-deleters and the takeover tests (``test_drain_many.py``,
``test_drain_takeover.py``): it opens a deployer, prints ``ready``, waits for ``go`` on stdin
(so that the processes' start-up, imports and all, is not what runs at once), then drains every
workload the selector matches, printing each event as a JSON line, and exits 0 (1 when the
drain raised).

    python -m tests.engines.deleter_process DRIVER KEY=VALUE [POINT]

``POINT`` holds the drain still at one step, for ever, once it prints ``at POINT`` (the test
then SIGKILLs the process there, leaving what a deleter killed at that step leaves):

- ``claim``: before its claim goes out (nothing claimed);
- ``claimed``: its claim answered, before any hook or signal;
- ``hooked``: a hook finished, before its container's stop signal goes out;
- ``signalled``: a stop signal sent, and no claim record written after it (on Docker the claim
  is the record: written with the claim, with nothing signalled in it);
- ``recorded``: a stop signal sent, and the claim record written after it (Docker: the one
  written with its claim).

A hook still running is not a point of this process: the test kills it once the hook's own
marker shows it runs inside the container.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from asyncdeploy import AsyncDeployError, open_deployer
from asyncdeploy._events import event_to_dict
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps

POINTS = ("claim", "claimed", "hooked", "signalled", "recorded")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _held(point: str) -> None:
    say(f"at {point}")
    await anyio.sleep_forever()


def hold_at(point: str) -> None:
    """Make this process's drains stop for ever at ``point`` (see the module's docstring)."""
    claim, signal, write_claim = (
        EngineContainerOps.claim,
        EngineContainerOps.signal,
        EngineContainerOps.write_claim,
    )

    async def held_claim(self: EngineContainerOps, *args: Any) -> Any:
        if point == "claim":
            await _held(point)
        answer = await claim(self, *args)
        if point == "claimed":
            await _held(point)
        return answer

    async def held_signal(self: EngineContainerOps, ref: Any, name: str) -> bool:
        stop_signal = name != "SIGKILL" and ref.role != "autoheal"
        if point == "hooked" and stop_signal:
            await _held(point)
        sent = await signal(self, ref, name)
        if point == "signalled" and stop_signal:
            await _held(point)
        if point == "recorded" and stop_signal and self.claim_is_record:
            await _held(point)  # Docker: its record was written with its claim
        return sent

    async def held_write_claim(self: EngineContainerOps, *args: Any) -> None:
        if point == "signalled":
            await anyio.sleep_forever()  # never written
        await write_claim(self, *args)
        if point == "recorded":
            await _held(point)

    EngineContainerOps.claim = held_claim  # type: ignore[method-assign]
    EngineContainerOps.signal = held_signal  # type: ignore[method-assign]
    EngineContainerOps.write_claim = held_write_claim  # type: ignore[method-assign]


async def main(driver: str, selector: str, point: str = "") -> int:
    if point:
        assert point in POINTS, point
        hold_at(point)
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
    sys.exit(anyio.run(main, *sys.argv[1:4]))
