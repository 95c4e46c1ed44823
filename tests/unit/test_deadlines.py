"""Every wait inside replace and verify is held to the operation's own deadline: an engine that
never answers a create ends the operation with ``OperationTimeout`` (on virtual time: the bound
passes at once), what it started removed, instead of a hang that lasts until CI's limit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs
import pytest

from asyncdeploy import Container, Deployer, OperationTimeout, Port, WorkloadPlan
from asyncdeploy._errors import EngineTimeout, WorkloadNotFound
from asyncdeploy.drivers.base import Found
from asyncdeploy.replace._run import LOCK_MARGIN
from asyncdeploy.verify.run import VerifyOptions, run_deadline, run_verify

pytestmark = pytest.mark.anyio

PLAN = WorkloadPlan(
    name="app",
    containers=[Container(name="server", image="busybox", ports=[Port(container_port=80)])],
)


@attrs.define
class SilentEngine:
    """Answers every look (nothing is there) and never answers a create."""

    name: str = "kubernetes"  # no host ports to read: the replace goes straight to the create
    markers: dict[str, str] = attrs.field(factory=dict)
    calls: list[str] = attrs.field(factory=list)

    async def get(self, name: str) -> Any:
        raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name)

    async def list(self, selector: object = None) -> list[Any]:
        return []

    async def find(self, names: Sequence[str]) -> Found:
        raise WorkloadNotFound(f"no workload named {names[0]!r}", engine=self.name)

    async def apply(self, plan: WorkloadPlan, **_: object) -> Any:
        self.calls.append(f"apply {plan.name}")
        await anyio.sleep_forever()  # the engine took the request and never answers

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> None:
        self.markers[key] = record

    async def retire_marker(self, key: str, record: str) -> None:
        self.markers.pop(key, None)  # (a replace that ends gives its lock back so)

    async def find_matching(self, selector: object) -> Found:
        return Found(names=())


async def test_a_replace_whose_create_never_answers_ends_at_its_locks_bound() -> None:
    engine = SilentEngine()
    started = anyio.current_time()
    with pytest.raises(OperationTimeout, match="lock's bound"):
        async with Deployer(engine).replacing(PLAN, ready_timeout=5, new_name="app-2"):  # type: ignore[arg-type]
            pass
    grace = PLAN.termination_grace_period_seconds
    assert anyio.current_time() - started == pytest.approx(5 + 2 * grace + LOCK_MARGIN, abs=1)
    assert engine.calls == ["apply app-2"]  # cancelled, a create removes what it made
    assert engine.markers == {}  # the lock was given back


@attrs.define
class NeverReady(SilentEngine):
    """Creates at once; the new instance never becomes ready (its own wait times out)."""

    async def apply(self, plan: WorkloadPlan, **_: object) -> Any:
        self.calls.append(f"apply {plan.name}")

    async def wait_ready(self, name: str, *, timeout: float) -> Any:
        await anyio.sleep(timeout)
        raise EngineTimeout(f"{name} was not ready within {timeout:g} s", engine=self.name)


async def test_a_steps_own_timeout_is_not_the_operations() -> None:
    """A new instance that is not ready within ``ready_timeout`` is that step's EngineTimeout
    (a TimeoutError too), raised at once, never mistaken for the replace's deadline."""
    engine = NeverReady()
    started = anyio.current_time()
    with pytest.raises(EngineTimeout, match="not ready within 5 s"):
        async with Deployer(engine).replacing(PLAN, ready_timeout=5, new_name="app-2"):  # type: ignore[arg-type]
            pass
    assert anyio.current_time() - started < 10


async def test_a_verify_run_whose_create_never_answers_ends_at_its_deadline() -> None:
    engine = SilentEngine(name="docker")
    options = VerifyOptions(ready_timeout=5)
    started = anyio.current_time()
    with pytest.raises(OperationTimeout, match="verify did not end within"):
        await run_verify(Deployer(engine), PLAN, options)  # type: ignore[arg-type]
    assert anyio.current_time() - started == pytest.approx(run_deadline(options, PLAN, 1), abs=1)
