"""The one Engine API driver behind Docker and Podman: the ``Driver`` facade over its parts.

The driver holds one :class:`~._session.EngineSession` (the client, the error mapping, the raw
calls; Podman's variant for its status codes and libpod calls) and hands it to the parts: the
create attempt (``_create.py``), the puller (``_pull.py``), the ready wait (``_ready.py``), the
drain's engine calls (``_container_ops.py``) and the markers (``_markers.py``). Socket discovery
lives in ``_docker.py`` and ``_podman.py``; engine errors are translated by the session only.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

import anyio
import attrs

from asyncdeploy._errors import (
    ENGINE_FAILURES,
    EngineUnavailable,
    PlanError,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._events import DrainSummary, Emit, ignore_events
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import (
    ApplyResult,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy._selectors import Selector, SelectorLike, as_selector
from asyncdeploy.drivers._replaced import drain_replaced
from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.engine import _build
from asyncdeploy.drivers.engine._address import ContextError, EngineAddress, plain_address
from asyncdeploy.drivers.engine._answer import answer_timeout
from asyncdeploy.drivers.engine._claim_marks import ClaimMarks
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._create import CreateAttempt
from asyncdeploy.drivers.engine._drain import DrainTimings, drain_workloads
from asyncdeploy.drivers.engine._exec import run_watched
from asyncdeploy.drivers.engine._history import events_query, parse_events
from asyncdeploy.drivers.engine._looks import EngineLooks
from asyncdeploy.drivers.engine._markers import EngineMarkers
from asyncdeploy.drivers.engine._ops import WorkloadSnapshot
from asyncdeploy.drivers.engine._pull import ImagePuller
from asyncdeploy.drivers.engine._ready import wait_until_ready
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.drivers.engine._state import (
    just_created,
    matching,
    ping_info,
    plan_order,
    planned_state,
    snapshot,
    volumes_status,
    workload_status,
)
from asyncdeploy.drivers.engine._unfinished import creators_alive, left_volumes
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_INSTANCE_OF,
    LABEL_LOCK,
    LABEL_LOCK_RECORD,
    LABEL_PLAN,
    LABEL_PLAN_DIGEST,
    LABEL_ROLE,
    LABEL_VOLUME_PLAN,
    LABEL_WORKLOAD,
)
from asyncdeploy.masking import mask_env_entry, mask_tree
from asyncdeploy.plan import WorkloadPlan, masked_plan_record, plan_digest, plan_from_record

__all__ = ["EngineAPIDriver", "EngineFound", "planned_state"]

PING_TIMEOUT = 10.0
HISTORY_TIMEOUT = 10.0  # one bounded read of the engine's event log


@attrs.frozen(kw_only=True)
class EngineFound(Found):
    """What an engine find found: each workload's containers as the list call showed them."""

    snapshots: tuple[WorkloadSnapshot, ...]


def _found(grouped: Mapping[str, Sequence[Mapping[str, Any]]]) -> EngineFound:
    return EngineFound(
        names=tuple(grouped), snapshots=tuple(snapshot(n, items) for n, items in grouped.items())
    )


class EngineAPIDriver:
    """Docker Engine API driver; subclasses say how to find the socket."""

    name: ClassVar[str]
    host_variable: ClassVar[str]  # the environment variable that names this engine's address

    def __init__(self, session: EngineSession) -> None:
        self.session = session
        self.ops = EngineContainerOps(session)  # the drain's engine calls
        self.markers = EngineMarkers(session)
        self.looks = EngineLooks(session)  # shared by concurrent calls
        self.marks = ClaimMarks(self.name, self.ops)  # a drain's claim, as looks show it

    @property
    def url(self) -> str:
        return self.session.url

    @property
    def api_version(self) -> str:
        return self.session.api_version  # what the engine said it speaks (devices depend on it)

    @classmethod
    def discover_url(cls) -> str:
        raise NotImplementedError

    # --- Lifecycle (base.Lifecycle): open, ping, close -------------------------------------------

    @classmethod
    def find_address(cls, url: str | None, docker_context: str | None) -> EngineAddress:
        """Where the engine is: ``url``, else discovered (Docker: its contexts too, ``_docker``).
        Reads files: off the event loop."""
        return plain_address(url or cls.discover_url(), engine=cls.name)

    @classmethod
    async def connect(cls, *, url: str | None = None) -> Self:
        """Open the engine at ``url`` (else found) and check that it answers."""
        return await cls._connect(url, None)

    @classmethod
    async def _connect(cls, url: str | None, docker_context: str | None) -> Self:
        try:
            address = await anyio.to_thread.run_sync(cls.find_address, url, docker_context)
            session = EngineSession.open(address, engine=cls.name)
        except ContextError as exc:  # says which context, and where it was named
            raise EngineUnavailable(str(exc), engine=cls.name) from exc
        except ValueError as exc:  # no engine can answer there
            raise EngineUnavailable(
                f"{exc} (from --url or {cls.host_variable})", engine=cls.name
            ) from exc
        try:
            info = await cls(session).ping()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.aclose()
            raise
        # DOCKER_HOST often points at Podman's socket: then Podman's quirks apply.
        chosen = cls._for_engine(info.engine)
        return cast(Self, chosen(session.variant(chosen.name, info.api_version)))

    @classmethod
    def _for_engine(cls, engine: str) -> type[EngineAPIDriver]:
        """The driver class for the engine that answered (``docker`` or ``podman``)."""
        return cls

    async def aclose(self) -> None:
        await self.session.aclose()

    async def ping(self) -> EngineInfo:
        try:
            with self.session.errors("ping"), anyio.fail_after(PING_TIMEOUT):
                if (info := ping_info(self.name, await self.session.ping())) is not None:
                    return info
                version = await self.session.version()
        except ENGINE_FAILURES as exc:
            raise EngineUnavailable(
                f"no {self.name} engine answers at {self.session.address}: {exc.message}",
                engine=self.name,
            ) from exc
        components = {str(c.get("Name", "")) for c in version.get("Components") or []}
        return EngineInfo(
            driver=self.name,
            version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            engine="podman" if "Podman Engine" in components else "docker",
        )

    # --- Looks (base.Looks) ----------------------------------------------------------------------

    async def get(self, name: str) -> WorkloadStatus:
        items = await self._items(name)
        return await self.marks.status(name, items, await self._restarts(items))

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        chosen = as_selector(selector)
        everything = await self.looks.everything()
        chosen_ones = matching(everything, chosen)
        restarts = await self._restarts([i for items in chosen_ones.values() for i in items])
        claims = await self.ops.claim_records() if chosen_ones else None
        marked: dict[str, WorkloadStatus] = {}

        async def mark(name: str, items: Sequence[Mapping[str, Any]]) -> None:
            marked[name] = await self.marks.status(name, items, restarts, claims)

        async with anyio.create_task_group() as tg:  # a claim waited for is waited for once
            for name, items in chosen_ones.items():
                tg.start_soon(mark, name, items)
        found = [marked[name] for name in chosen_ones]
        for plan, (why, labels) in (await self._left_volumes(everything, None)).items():
            if chosen is None or chosen.matches({**labels, LABEL_WORKLOAD: plan}):
                found.append(volumes_status(self.name, plan, why, labels))
        return sorted(found, key=lambda status: status.name)

    async def _left_volumes(
        self, grouped: Mapping[str, Sequence[Mapping[str, Any]]], plan: str | None
    ) -> dict[str, tuple[str, dict[str, str]]]:
        """The plans (or ``plan``) whose named volumes no container uses (``left_volumes``)."""
        label = LABEL_VOLUME_PLAN if plan is None else f"{LABEL_VOLUME_PLAN}={plan}"
        with self.session.errors("list volumes"):
            volumes = await self.looks.volumes(label)
            markers = await self.looks.volumes(LABEL_LOCK) if volumes else []
        # a replace lock held (a tombstone, its empty record, says it is free: _markers.py)
        markers = [m for m in markers if (m.get("Labels") or {}).get(LABEL_LOCK_RECORD)]
        items = [item for group in grouped.values() for item in group]
        return left_volumes(volumes, items, markers)

    async def _restarts(self, items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        return await self.session.restarts([str(item["Id"]) for item in items])

    async def _items(self, name: str) -> builtins.list[dict[str, Any]]:
        """The workload's list entries; ``WorkloadNotFound`` when it has none."""
        items = (await self.looks.named(name)).get(name)
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name)
        return items

    async def _container_id(self, name: str, container: str | None) -> str:
        items = await self._items(name)
        for item in sorted(items, key=plan_order):  # None: the plan's first run container
            labels = item["Labels"]
            if (container is None and labels.get(LABEL_ROLE) == "run") or labels.get(
                LABEL_CONTAINER
            ) == container:
                return str(item["Id"])
        have = [
            str(item["Labels"].get(LABEL_CONTAINER))
            for item in sorted(items, key=plan_order)
            if item["Labels"].get(LABEL_ROLE) != "pause"
        ]
        raise WorkloadNotFound(
            f"workload {name!r} has no container {container!r} (it has {', '.join(have)})",
            engine=self.name,
        )

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
        params: dict[str, Any] = {"stdout": True, "stderr": True, "timestamps": timestamps}
        if tail is not None:
            params["tail"] = str(tail)
        if since is not None:
            params["since"] = int(since)
        return self._logs(name, container, follow, params)

    async def _logs(
        self, name: str, container: str | None, follow: bool, params: dict[str, Any]
    ) -> AsyncIterator[str]:
        ident = await self._container_id(name, container)
        with self.session.errors(f"logs of {name}"):
            if not follow:
                for chunk in await self.session.logs(ident, **params):
                    yield chunk
                return
            async for chunk in self.session.follow_logs(ident, **params):
                yield chunk

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
        """Run ``command`` in the container, its output to ``on_output`` as it comes; a
        container that stops before the command ends is ``ExecInterrupted`` (``_exec.py``)."""
        ident = await self._container_id(name, container)
        return await run_watched(
            self.session,
            ident,
            command,
            what=f"exec in {name}",
            shown=container or ident[:12],
            on_output=on_output,
            stdin=stdin,
            tty=tty,
            size=size,
        )

    async def inspect(self, name: str) -> dict[str, Any]:
        details = {}
        for item in await self._items(name):
            with self.session.errors(f"inspect {name}"):
                data = await self.session.show(item["Id"])
            config = data.get("Config") or {}
            config["Env"] = [mask_env_entry(entry) for entry in config.get("Env") or []]
            labels = config.get("Labels") or {}
            if LABEL_PLAN in labels:
                labels[LABEL_PLAN] = masked_plan_record(labels[LABEL_PLAN])
            details[item["Labels"].get(LABEL_CONTAINER, item["Id"])] = mask_tree(data)
        return {"workload": name, "driver": self.name, "containers": details}

    async def recorded_plan(self, name: str) -> WorkloadPlan | None:
        """The plan the workload was created from, read from its pause container's labels."""
        items = await self._items(name)
        pauses = [i for i in items if i["Labels"].get(LABEL_ROLE) == "pause"]
        return plan_from_record(pauses[0]["Labels"].get(LABEL_PLAN)) if pauses else None

    async def recent_events(self, name: str, *, limit: int) -> builtins.list[WorkloadEvent]:
        items = await self._items(name)
        since = min(int(i.get("Created") or 0) for i in items)
        params = events_query(name, since, time.time(), engine=self.name)
        with self.session.errors(f"events of {name}"), anyio.fail_after(HISTORY_TIMEOUT):
            async with self.session.query("events", params=params) as response:
                text = await response.text()
        return parse_events(text.splitlines(), limit=limit)

    # --- Images (base.Images; builds: _build.py) -------------------------------------------------

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        return await _build.image_labels(self.session, image)

    async def build_image(
        self,
        context: bytes,
        tag: str,
        *,
        labels: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        await _build.build_image(self.session, context, tag, labels=labels, on_line=on_line)

    async def image_ports(self, image: str) -> frozenset[int] | None:
        try:
            with self.session.errors(f"inspect image {image}"):
                details = await self.session.inspect_image(image)
        except WorkloadNotFound:
            return None
        exposed = (details.get("Config") or {}).get("ExposedPorts") or {}
        return frozenset(
            int(port)
            for key in exposed
            for port, _, proto in [key.partition("/")]
            if proto in ("", "tcp") and port.isdigit()
        )

    # --- Drains (base.Drains, the primitive; its engine calls: _container_ops.py) ----------------

    async def find(self, names: Sequence[str]) -> EngineFound:
        """One list call: filtered by name for one workload, all of asyncdeploy's for several."""
        names = tuple(dict.fromkeys(names))
        if not names:
            return _found({})
        grouped = await (
            self.looks.named(names[0]) if len(names) == 1 else self.looks.by_workload()
        )
        missing = [n for n in names if n not in grouped]
        for name in list(missing):  # only its volumes left (a killed create): drained away
            if await self._only_volumes_left(name, grouped if len(names) > 1 else None):
                grouped[name] = []
                missing.remove(name)
        if missing:
            raise WorkloadNotFound(
                f"no workload named {', '.join(map(repr, missing))}", engine=self.name
            )
        return _found({n: grouped[n] for n in names})

    async def _only_volumes_left(
        self, plan: str, everything: Mapping[str, Sequence[Mapping[str, Any]]] | None
    ) -> bool:
        """Whether ``plan`` has named volumes and no container (looked for by name, then as an
        instance's plan: listed only when it has volumes)."""
        try:
            with self.session.errors(f"list volumes of {plan}"):
                if not await self.session.volumes(f"{LABEL_VOLUME_PLAN}={plan}"):
                    return False
        except WorkloadNotFound:
            return False
        if everything is None:
            everything = await self.looks.by_workload({LABEL_INSTANCE_OF: plan})
        return plan in await self._left_volumes(everything, plan)

    async def find_matching(self, selector: Selector | None) -> EngineFound:
        return _found(matching(await self.looks.by_workload(), selector))

    async def drain(
        self,
        found: Found,
        *,
        grace_period_seconds: int | None,
        emit: Emit,
        keep_volumes: bool = False,
    ) -> builtins.list[DrainSummary]:
        if not isinstance(found, EngineFound):
            raise TypeError(f"{self.name} drains only what its own find returned, not {found!r}")
        return await drain_workloads(
            self.ops,
            found.snapshots,
            grace_period_seconds=grace_period_seconds,
            emit=emit,
            engine=self.name,
            keep_volumes=keep_volumes,
            timings=DrainTimings(call_margin=answer_timeout()),
        )

    # --- Lifecycle: create, pull, wait until ready -----------------------------------------------

    async def apply(
        self,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill: KillSwitch | None = None,
    ) -> ApplyResult:
        """Create the workload; unchanged → no call that writes; changed → drain, then create
        (a failed drain raises ``DrainError`` and creates nothing; a cancellation lets a begun
        drain finish: :func:`~asyncdeploy.drivers._replaced.drain_replaced`)."""
        if plan.node_selector:  # before anything is touched: no drain of what it would replace
            raise PlanError(
                "node_selector",
                f"{self.name} runs workloads on its one host, which no node selector picks "
                "(a Kubernetes field: remove it, or use --driver kubernetes)",
            )
        grouped = await self.looks.named(plan.name)
        existing = grouped.get(plan.name)
        replaced = None
        if existing:
            digests = {c["Labels"].get(LABEL_PLAN_DIGEST) for c in existing}
            names = {c["Labels"].get(LABEL_CONTAINER) for c in existing}
            wanted = {"pause", *(c.name for c in plan.containers)}
            if plan.autoheal is not None:
                wanted.add("autoheal")
            if digests == {plan_digest(plan)}:
                state = planned_state(existing, time.time()) if names == wanted else "building"
                if state == "as-planned":
                    return ApplyResult(
                        action="unchanged",
                        status=workload_status(
                            self.name, plan.name, existing, await self._restarts(existing)
                        ),
                    )
                if state == "building" and creators_alive(existing) is not False:
                    # The same plan, half built: another create is at work (or was killed
                    # where its death cannot be told). Never replace it under that create's feet.
                    raise WorkloadConflict(
                        f"workload {plan.name!r} is being created by another command (it has "
                        f"{', '.join(sorted(map(str, names)))} of {', '.join(sorted(wanted))}), "
                        "or a create of it was killed; wait and retry, or delete it",
                        engine=self.name,
                    )
                # "dead": the same plan, complete, but not in the state it asks for (left
                # unstarted by a killed create, half deleted, every run container exited), or
                # half built by a create whose process is dead: repaired below like a changed
                # plan, its remains drained first (hooks and signals, as reconcile would).
        # Pull what is needed, then create: a failed pull leaves the old workload serving.
        await ImagePuller(self.session, self.looks.image_present).pull_for(
            plan, emit or ignore_events
        )
        if existing:
            try:
                found = await self.find([plan.name])  # afresh: the pull may have taken long
            except WorkloadNotFound:
                existing = None  # it went in the meantime
            else:
                # the plan's named volumes stay: the workload created next mounts them
                replaced = await drain_replaced(
                    plan.name,
                    lambda watch: self.drain(
                        found, grace_period_seconds=None, emit=watch, keep_volumes=True
                    ),
                    emit or ignore_events,
                    kill,
                )
        items = await CreateAttempt(self.session, self.ops, plan).run()
        return ApplyResult(
            action="replaced" if existing else "created",
            status=workload_status(self.name, plan.name, items, just_created(items)),
            replaced=replaced,
        )

    async def pull(self, plan: WorkloadPlan, *, emit: Emit) -> None:
        await ImagePuller(self.session, self.looks.image_present).pull_for(plan, emit)

    async def wait_ready(
        self, name: str, *, timeout: float, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        """Every run container ready, or ``CreateError`` with the exit code and the logs of one
        that ended first (``_ready.py``)."""
        return await wait_until_ready(self.ops, name, timeout=timeout, settle=settle_seconds)

    # --- Markers (base.Markers: a replace's lock, _markers.py) -----------------------------------

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        return await self.markers.hold_marker(key, record, labels=labels)

    async def read_marker(self, key: str) -> str | None:
        return await self.markers.read_marker(key)

    async def drop_marker(self, key: str, record: str) -> None:
        await self.markers.drop_marker(key, record)

    async def marker_keys(self) -> builtins.list[str]:
        return await self.markers.keys()

    async def retire_marker(self, key: str, record: str) -> None:
        await self.markers.retire(key, record)
