"""Test a control plane of your own without an engine: ``asyncdeploy.testing.FakeDriver``.

    python examples/testing.py

The control plane's rule here: drain a workload, but never wait past a budget; past it, kill
what is left (the drain handle's ``kill()``: the survivors SIGKILLed, everything removed, the
events to their end). The fake driver scripts a server that needs 3 s to drain, then one that
needs half a second, and the rule is checked against both, with no engine and no image.
"""

from __future__ import annotations

import anyio

from asyncdeploy import Container, Deployer, DrainEvent, DrainSummary, WorkloadPlan
from asyncdeploy.testing import FakeDriver


async def delete_within(deployer: Deployer, name: str, budget: float) -> DrainSummary:
    """The control plane's delete: a drain of at most ``budget`` seconds, then a kill."""
    async with deployer.terminate(name) as drain:
        with anyio.move_on_after(budget) as waiting:
            async for event in drain:
                show(event)
        if waiting.cancelled_caught:
            print(f"  past the {budget:g} s budget: kill")
            drain.kill()
            async for event in drain:
                show(event)
    [summary] = drain.summaries
    return summary


def show(event: DrainEvent) -> None:
    print(f"  {event.elapsed:5.2f} s  {type(event).__name__}")


PLAN = WorkloadPlan(name="llm", containers=[Container(name="server", image="any/image")])


async def main() -> None:
    driver = FakeDriver()
    deployer = Deployer(driver)
    for drain_seconds, expected in ((3.0, "killed"), (0.5, "exited")):
        await deployer.create(PLAN)
        driver.script("llm", "server", drain=drain_seconds)
        print(f"a server that drains in {drain_seconds:g} s, a budget of 1 s:")
        summary = await delete_within(deployer, "llm", budget=1.0)
        [server] = [c for c in summary.containers if c.name == "server"]
        assert server.outcome == expected, summary
        print(
            f"  -> {server.outcome} (exit {server.exit_code}); nothing left: {driver.plans == {}}"
        )


if __name__ == "__main__":
    anyio.run(main)
