"""A ``Driver`` without an engine: each workload's containers are fakes (:class:`FakeOps`), and
its delete is the real engine drain over them (the same order, deadline, events and summary a
Docker or Podman delete gives).

Containers start running on ``create`` (init containers have run and exited 0) and, unless
scripted otherwise, exit 0 at their stop signal. :meth:`FakeDriver.script` changes how one
behaves (a drain that takes seconds, a stop signal it ignores, a hook, a crash), and
:meth:`FakeDriver.engine` hands out a workload's :class:`FakeOps` for faults (a call refused, an
engine that goes away).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import attrs

from asyncdeploy._errors import (
    DrainUnreachable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._events import DrainSummary, Emit
from asyncdeploy._results import (
    ContainerStatus,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy._selectors import Selector, SelectorLike, as_selector
from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._ops import WorkloadSnapshot
from asyncdeploy.drivers.parts import DrainThenMake, NoImages, ProcessMarkers, ReadyByLooks
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan, plan_digest
from asyncdeploy.testing._ops import ENGINE, Box, FakeOps

__all__ = ["FakeDriver"]

_STATES = {"running": "running", "paused": "paused", "exited": "exited", "gone": "removed"}


class FakeDriver(DrainThenMake, ReadyByLooks, NoImages, ProcessMarkers):
    """An in-memory driver: hand it to :class:`asyncdeploy.Deployer` (``Deployer(FakeDriver())``)
    and every call works as on an engine, without one.

    It writes the drain (the real engine drain over its fakes), ``make`` and its looks; the rest
    of the driver comes from :mod:`asyncdeploy.drivers.parts` (``apply`` over the drain, the
    ready wait by looks, no images, markers in this process)."""

    name: ClassVar[str] = ENGINE
    no_build: ClassVar[str] = "the fake driver builds no images"

    def __init__(self) -> None:
        super().__init__()
        self.plans: dict[str, WorkloadPlan] = {}
        self._engines: dict[str, FakeOps] = {}

    # --- scripting ------------------------------------------------------------------------

    def engine(self, workload: str) -> FakeOps:
        """The fake engine calls of ``workload``'s containers: ``fail(call, container, error)``,
        ``down = True``, ``log`` (every call made)."""
        try:
            return self._engines[workload]
        except KeyError:
            raise WorkloadNotFound(f"no workload named {workload!r}", engine=ENGINE) from None

    def script(self, workload: str, container: str, **behaviour: Any) -> Box:
        """How one container behaves from now on: ``drain`` (seconds from its stop signal to
        its exit 0), ``ignores_term``, ``hook`` and ``hook_code`` (its ``pre_stop`` hook's
        seconds and exit code), ``crash_in_hook``, ``restarts``."""
        box = self.engine(workload).boxes[container]
        for field, value in behaviour.items():
            if field not in attrs.fields_dict(Box) or field in ("ref", "state", "changed"):
                raise TypeError(f"a container cannot be scripted with {field!r}")
            setattr(box, field, value)
        return box

    def exit(self, workload: str, container: str, code: int) -> None:
        """The container's process exits now with ``code`` (a crash, an OOM kill: 137)."""
        self.engine(workload).boxes[container].die(code)

    # --- the Driver contract ----------------------------------------------------------------

    @classmethod
    async def connect(cls) -> FakeDriver:
        return cls()

    async def ping(self) -> EngineInfo:
        return EngineInfo(driver=ENGINE, version="0", api_version="0", engine=ENGINE)

    async def make(self, plan: WorkloadPlan) -> WorkloadStatus:
        """The create itself (``DrainThenMake.apply`` drains what it replaces first)."""
        await anyio.lowlevel.checkpoint()  # an engine call: a cancellation lands here
        if plan.name in self.plans:
            raise WorkloadConflict(f"workload {plan.name!r} is still there", engine=ENGINE)
        ops = FakeOps()
        ops.add("pause", "pause")
        for c in plan.containers:
            http = c.pre_stop_http
            ops.add(
                c.name,
                c.role,
                state="exited" if c.role == "init" else "running",
                exit_code=0 if c.role == "init" else None,
                pre_stop=c.pre_stop,
                pre_stop_http=None if http is None else (http.port, http.path),
                stop_signal=c.stop_signal or "SIGTERM",
                restart_policy=c.restart_policy,
            )
        if plan.autoheal is not None:
            ops.add("autoheal", "autoheal")
        self.plans[plan.name] = plan
        self._engines[plan.name] = ops
        return await self.get(plan.name)

    async def pull(self, plan: WorkloadPlan, *, emit: Emit) -> None:
        return None  # nothing to pull: the fake runs no image

    async def get(self, name: str) -> WorkloadStatus:
        plan, ops = self.plans.get(name), self._engines.get(name)
        if plan is None or ops is None:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=ENGINE)
        images = {c.name: c.image for c in plan.containers}
        return WorkloadStatus(
            name=name,
            driver=ENGINE,
            labels=_labels(plan),
            grace_period_seconds=plan.termination_grace_period_seconds,
            plan_digest=plan_digest(plan),
            containers=tuple(
                ContainerStatus(
                    name=box.ref.name,
                    role=box.ref.role,
                    image=images.get(box.ref.name, ""),
                    state=_STATES[box.state],
                    exit_code=box.exit_code,
                )
                for box in ops.boxes.values()
                if box.state != "gone"
            ),
        )

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        return [await self.get(name) for name in self._matching(as_selector(selector))]

    def _matching(self, selector: Selector | None) -> builtins.list[str]:
        return sorted(
            name
            for name, plan in self.plans.items()
            if selector is None or selector.matches(_labels(plan))
        )

    async def recent_events(self, name: str, *, limit: int) -> builtins.list[WorkloadEvent]:
        await self.get(name)
        return []

    def logs(
        self,
        name: str,
        *,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        return self._no_lines(name)

    async def _no_lines(self, name: str) -> AsyncIterator[str]:
        await self.get(name)
        printed: tuple[str, ...] = ()  # the fakes print nothing
        for line in printed:
            yield line

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        on_output: Callable[[str], None] | None = None,
        stdin: AsyncIterable[bytes] | None = None,
        tty: bool = False,
        size: tuple[int, int] | None = None,
    ) -> ExecResult:
        await self.get(name)
        return ExecResult(exit_code=0, output="")

    async def inspect(self, name: str) -> dict[str, Any]:
        status = await self.get(name)
        return {"name": name, "containers": {c.name: attrs.asdict(c) for c in status.containers}}

    async def find(self, names: Sequence[str]) -> Found:
        missing = [n for n in names if n not in self.plans]
        if missing:
            raise WorkloadNotFound(
                f"no workload named {', '.join(map(repr, missing))}", engine=ENGINE
            )
        return Found(names=tuple(names))

    async def find_matching(self, selector: Selector | None) -> Found:
        return Found(names=tuple(self._matching(selector)))

    async def drain(
        self,
        found: Found,
        *,
        grace_period_seconds: int | None,
        emit: Emit,
        keep_volumes: bool = False,
    ) -> builtins.list[DrainSummary]:
        """Each workload drained by the engine drain over its fakes, all at once; cancelled,
        the drain's own cleanup kills and removes what is left (the kill of a handle)."""
        summaries: builtins.list[DrainSummary] = []
        unreachable: builtins.list[DrainUnreachable] = []

        async def drain_one(name: str) -> None:
            ops, plan = self._engines[name], self.plans[name]
            snapshot = WorkloadSnapshot(
                name=name,
                grace_period_seconds=plan.termination_grace_period_seconds,
                containers=tuple(b.ref for b in ops.boxes.values() if b.state != "gone"),
                volumes=False,
            )
            try:
                summaries.extend(
                    await drain_workloads(
                        ops,
                        [snapshot],
                        grace_period_seconds=grace_period_seconds,
                        emit=emit,
                        engine=ENGINE,
                        keep_volumes=keep_volumes,
                    )
                )
            except DrainUnreachable as exc:
                unreachable.append(exc)
                summaries.extend(exc.summaries)
            finally:
                if all(box.state == "gone" for box in ops.boxes.values()):
                    del self.plans[name], self._engines[name]

        async with anyio.create_task_group() as tg:
            for name in found.names:
                tg.start_soon(drain_one, name)
        if unreachable:
            raise DrainUnreachable(summaries, engine=ENGINE)
        return summaries

    async def recorded_plan(self, name: str) -> WorkloadPlan | None:
        await self.get(name)  # WorkloadNotFound first
        return self.plans[name]

    async def aclose(self) -> None:
        return None


def _labels(plan: WorkloadPlan) -> dict[str, str]:
    """The plan's labels, and the plan an instance belongs to (as the engines label it)."""
    return {**plan.labels, **({LABEL_INSTANCE_OF: plan.instance_of} if plan.instance_of else {})}
