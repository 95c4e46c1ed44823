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
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio
import attrs

from asyncdeploy._errors import (
    CreateError,
    DrainUnreachable,
    EngineAPIError,
    EngineTimeout,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._events import DrainSummary, Emit, ignore_events
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import (
    ApplyResult,
    ContainerStatus,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy._selectors import Selector, SelectorLike, as_selector
from asyncdeploy.drivers._replaced import drain_replaced
from asyncdeploy.drivers.base import READY_SETTLE_SECONDS, Found
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._ops import WorkloadSnapshot
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan, plan_digest
from asyncdeploy.testing._ops import ENGINE, Box, FakeOps

__all__ = ["FakeDriver"]

_STATES = {"running": "running", "paused": "paused", "exited": "exited", "gone": "removed"}


@attrs.frozen(kw_only=True)
class _Found(Found):
    pass


class FakeDriver:
    """An in-memory driver: hand it to :class:`asyncdeploy.Deployer` (``Deployer(FakeDriver())``)
    and every call works as on an engine, without one."""

    name: ClassVar[str] = ENGINE

    def __init__(self) -> None:
        self.plans: dict[str, WorkloadPlan] = {}
        self._engines: dict[str, FakeOps] = {}
        self._markers: dict[str, str] = {}

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

    async def apply(
        self, plan: WorkloadPlan, *, emit: Emit | None = None, kill: KillSwitch | None = None
    ) -> ApplyResult:
        emit = emit or ignore_events
        replaced: DrainSummary | None = None
        if plan.name in self.plans:
            status = await self.get(plan.name)
            if status.plan_digest == plan_digest(plan) and status.state == "running":
                return ApplyResult(action="unchanged", status=status)
            found = await self.find([plan.name])
            replaced = await drain_replaced(
                plan.name,
                lambda watch: self.drain(found, grace_period_seconds=None, emit=watch),
                emit,
                kill,
            )
        if plan.name in self.plans:
            raise WorkloadConflict(f"workload {plan.name!r} is still there", engine=ENGINE)
        self._make(plan)
        return ApplyResult(
            action="created" if replaced is None else "replaced",
            status=await self.get(plan.name),
            replaced=replaced,
        )

    def _make(self, plan: WorkloadPlan) -> None:
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

    async def image_ports(self, image: str) -> frozenset[int] | None:
        return None

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        return None  # no images: a plan's images are taken as they are

    async def build_image(
        self,
        context: bytes,
        tag: str,
        *,
        labels: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        raise EngineAPIError("the fake driver builds no images", engine=ENGINE, status=0)

    async def wait_ready(
        self, name: str, *, timeout: float, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        """Ready: every run container runs, and still runs ``settle_seconds`` later (default
        ``READY_SETTLE_SECONDS``, as on an engine); one that exited is a ``CreateError`` with
        its exit code."""
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
                    settled = await self._still_running(name, settle)
                    if settled is not None:
                        return settled
        except TimeoutError:
            raise EngineTimeout(
                f"{name} was not ready within {timeout:g} s", engine=ENGINE
            ) from None

    async def _still_running(self, name: str, settle: float) -> WorkloadStatus | None:
        await anyio.sleep(settle)
        status = await self.get(name)
        runs = [c for c in status.containers if c.role == "run"]
        return status if all(c.state == "running" for c in runs) else None

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
        return _Found(names=tuple(names))

    async def find_matching(self, selector: Selector | None) -> Found:
        return _Found(names=tuple(self._matching(selector)))

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

    async def aclose(self) -> None:
        return None


def _labels(plan: WorkloadPlan) -> dict[str, str]:
    """The plan's labels, and the plan an instance belongs to (as the engines label it)."""
    return {**plan.labels, **({LABEL_INSTANCE_OF: plan.instance_of} if plan.instance_of else {})}
