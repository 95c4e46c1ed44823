"""The parts of :class:`~asyncdeploy.drivers.base.Driver` a driver need not write: mix them in.

A driver writes its :class:`~asyncdeploy.drivers.base.Drains` (the one primitive) and its looks;
the rest can come from here, as httpx's client is built on one transport call:

- :class:`NoImages`: an engine whose images the driver cannot see (Kubernetes: the node pulls;
  the in-memory fake: it runs no image).
- :class:`ProcessMarkers`: markers held in this process (workloads that live in it too: the fake).
- :class:`ReadyByLooks`: ``wait_ready`` by looking (``get``) until every run container has run
  for the settle time.
- :class:`DrainThenMake`: ``apply`` over the drain primitive: unchanged → nothing; otherwise the
  old workload drained (as every driver's replacement drain, ``_replaced.py``), then ``make``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import ClassVar, Protocol

import anyio

from asyncdeploy._errors import CreateError, EngineAPIError, EngineTimeout, WorkloadNotFound
from asyncdeploy._events import DrainSummary, Emit, ignore_events
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import ApplyResult, WorkloadStatus
from asyncdeploy.drivers._replaced import drain_replaced
from asyncdeploy.drivers.base import READY_SETTLE_SECONDS, Drains, Looks
from asyncdeploy.plan import WorkloadPlan, plan_digest

__all__ = ["DrainThenMake", "NoImages", "ProcessMarkers", "ReadyByLooks"]


class NoImages:
    """:class:`~asyncdeploy.drivers.base.Images` for a driver that cannot see images: every
    image is taken as it is, and a build is refused with ``no_build``."""

    name: ClassVar[str]
    no_build: ClassVar[str] = "this driver builds no images"

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        return None

    async def image_ports(self, image: str) -> frozenset[int] | None:
        return None

    async def build_image(
        self,
        context: bytes,
        tag: str,
        *,
        labels: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        raise EngineAPIError(self.no_build, engine=self.name, status=0)


class ProcessMarkers:
    """:class:`~asyncdeploy.drivers.base.Markers` held by this process alone."""

    def __init__(self) -> None:
        self._markers: dict[str, str] = {}

    async def read_marker(self, key: str) -> str | None:
        return self._markers.get(key)

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        held = self._markers.get(key)
        if held is None:
            self._markers[key] = record
        return held

    async def drop_marker(self, key: str, record: str) -> None:
        if self._markers.get(key) == record:
            del self._markers[key]

    async def marker_keys(self) -> builtins.list[str]:
        return sorted(self._markers)

    async def retire_marker(self, key: str, record: str) -> None:
        await self.drop_marker(key, record)  # a dropped marker leaves nothing here


class _Named(Looks, Protocol):
    name: ClassVar[str]


class ReadyByLooks:
    """``wait_ready`` by looking: every run container running, and still running
    ``settle_seconds`` later (default :data:`READY_SETTLE_SECONDS`, as on an engine); one that
    is not running is a ``CreateError`` with its exit code, ``timeout`` an ``EngineTimeout``."""

    async def wait_ready(
        self: _Named, name: str, *, timeout: float, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        settle = READY_SETTLE_SECONDS if settle_seconds is None else settle_seconds
        try:
            with anyio.fail_after(timeout):
                while True:
                    status = await self.get(name)
                    ended = [
                        c for c in status.containers if c.role == "run" and c.state != "running"
                    ]
                    if ended:
                        raise CreateError(
                            f"{name}: container {ended[0].name} exited",
                            exit_code=ended[0].exit_code,
                        )
                    await anyio.sleep(settle)
                    status = await self.get(name)
                    if all(c.state == "running" for c in status.containers if c.role == "run"):
                        return status
        except TimeoutError:
            raise EngineTimeout(
                f"{name} was not ready within {timeout:g} s", engine=self.name
            ) from None


class _Makes(Drains, Looks, Protocol):
    async def make(self, plan: WorkloadPlan) -> WorkloadStatus: ...


class DrainThenMake:
    """``apply`` over the drain primitive and one ``make(plan)`` (the create itself): an
    unchanged plan over a running workload is a no-op; any other is drained first (a
    cancellation never cuts that drain short; ``kill`` does), then made."""

    async def apply(
        self: _Makes,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill: KillSwitch | None = None,
    ) -> ApplyResult:
        emit = emit or ignore_events
        replaced: DrainSummary | None = None
        try:
            status = await self.get(plan.name)
        except WorkloadNotFound:
            pass
        else:
            if status.plan_digest == plan_digest(plan) and status.state == "running":
                return ApplyResult(action="unchanged", status=status)
            found = await self.find([plan.name])
            replaced = await drain_replaced(
                plan.name,
                lambda watch: self.drain(found, grace_period_seconds=None, emit=watch),
                emit,
                kill,
            )
        return ApplyResult(
            action="created" if replaced is None else "replaced",
            status=await self.make(plan),
            replaced=replaced,
        )
