"""The create's roll-back: a lost connection is retried, and what stays on the engine is said
(it swallowed every error: containers leaked while the CLI said everything was removed)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from asyncdeploy import Container, WorkloadPlan
from asyncdeploy._errors import CreateError, EngineAPIError, EngineUnavailable
from asyncdeploy.drivers.engine._create import CreateAttempt
from asyncdeploy.drivers.engine._ops import ContainerRef

pytestmark = pytest.mark.anyio


class Driver:
    """The calls a roll-back makes (the session's and the drain's), failing as told; ``removed``
    says what went."""

    engine = "fake"
    api_version = "1.41"

    def __init__(self, failures: dict[str, list[Exception]]) -> None:
        self.failures = failures
        self.removed: list[str] = []

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        yield

    async def containers(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        return []

    async def create(self, config: dict[str, Any], name: str) -> str:
        raise CreateError(f"{name} did not start")

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        return True

    async def remove(self, ref: ContainerRef) -> None:
        if queued := self.failures.get(ref.name):
            raise queued.pop(0)
        self.removed.append(ref.name)


def attempt(driver: Driver) -> CreateAttempt:
    plan = WorkloadPlan(name="w", containers=[Container(name="app", image="x")])
    made = CreateAttempt(driver, driver, plan)  # type: ignore[arg-type]
    made.created = [
        ContainerRef(id="p", name="pause", role="pause", running=True),
        ContainerRef(id="a", name="app", role="run", running=True),
    ]
    return made


async def test_a_removal_lost_with_the_connection_is_tried_again() -> None:
    driver = Driver({"app": [EngineUnavailable("reset", engine="fake")] * 2})
    left = await attempt(driver)._roll_back()
    assert driver.removed == ["app", "pause"]
    assert left == []


async def test_what_the_roll_back_cannot_remove_is_in_the_error() -> None:
    driver = Driver({"app": [EngineAPIError("refused", engine="fake", status=500)]})
    with pytest.raises(CreateError) as caught:
        await attempt(driver).run()
    assert "did not start" in str(caught.value) and "w_app" in str(caught.value)
    assert driver.removed == ["pause"]
