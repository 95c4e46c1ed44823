"""The one Engine API driver behind Docker and Podman, on aiodocker.

Engine-specific parts (socket discovery, Podman's status codes) live in ``_docker.py`` and
``_podman.py``; the create in ``_create.py``, the pulls in ``_pull.py``, the drain's engine calls
in ``_container_ops.py``; the rest is here. Engine errors are translated in :meth:`_errors` only.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self, cast

import aiodocker
import aiohttp
import anyio
import attrs

from asyncdeploy.drivers._replaced import drain_replaced
from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._create import CreateAttempt
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._history import events_query, parse_events
from asyncdeploy.drivers.engine._markers import EngineMarkers
from asyncdeploy.drivers.engine._ops import ContainerRef, WorkloadSnapshot
from asyncdeploy.drivers.engine._pull import ImagePuller
from asyncdeploy.drivers.engine._ready import wait_until_ready
from asyncdeploy.drivers.engine._state import (
    plan_order,
    planned_state,
    snapshot,
    workload_labels,
    workload_status,
)
from asyncdeploy.drivers.engine._unfinished import dead_claim
from asyncdeploy.errors import (
    EngineAPIError,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    ExecInterrupted,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.events import DrainSummary, Emit, ignore_events
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_PLAN_DIGEST,
    LABEL_ROLE,
    LABEL_WORKLOAD,
)
from asyncdeploy.masking import mask_env_entry, mask_tree
from asyncdeploy.plan import Container, WorkloadPlan, plan_digest
from asyncdeploy.results import (
    ApplyResult,
    EngineInfo,
    ExecResult,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy.selectors import Selector, SelectorLike, as_selector

__all__ = ["EngineAPIDriver", "EngineFound", "planned_state"]

PING_TIMEOUT = 10.0
EXEC_WATCH_INTERVAL = 1.0  # how often an exec looks whether its container still runs
HISTORY_TIMEOUT = 10.0  # one bounded read of the engine's event log
# A connection cut while a response streams in is a lost connection, like a refused one.
_CONNECTION_LOST = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    FileNotFoundError,
)


@attrs.frozen(kw_only=True)
class EngineFound(Found):
    """What an engine find found: each workload's containers as the list call showed them."""

    snapshots: tuple[WorkloadSnapshot, ...]


def _found(grouped: Mapping[str, Sequence[Mapping[str, Any]]]) -> EngineFound:
    return EngineFound(
        names=tuple(grouped), snapshots=tuple(snapshot(n, items) for n, items in grouped.items())
    )


class EngineAPIDriver(EngineMarkers, EngineContainerOps):
    """Docker Engine API driver; subclasses say how to find the socket and read quirks."""

    name: ClassVar[str]
    host_variable: ClassVar[str]  # the environment variable that names this engine's address

    def __init__(self, client: aiodocker.Docker, url: str, api_version: str = "") -> None:
        self._client = client
        self.url = url
        self.api_version = api_version  # what the engine said it speaks (devices depend on it)

    # --- engine-specific hooks ---------------------------------------------------------------

    @classmethod
    def discover_url(cls) -> str:
        raise NotImplementedError

    def _conflict(self, exc: aiodocker.DockerError) -> bool:
        """Whether an error means "wrong state / name taken" (Docker answers 409)."""
        return bool(exc.status == 409)

    def _missing(self, exc: aiodocker.DockerError) -> bool:
        """Whether an error means "no such object" (Docker answers 404)."""
        return bool(exc.status == 404)

    # --- life cycle --------------------------------------------------------------------------

    @classmethod
    async def connect(cls, *, url: str | None = None) -> Self:
        """Open the engine at ``url`` (else discovered) and check that it answers."""
        url = url or cls.discover_url()
        try:
            client = aiodocker.Docker(url=url)
        except ValueError as exc:  # aiodocker refuses the scheme: no engine can answer there
            raise EngineUnavailable(
                f"{url!r} is not an engine address (unix://, tcp://, http:// or https://; "
                f"from --url or {cls.host_variable}): {exc}",
                engine=cls.name,
            ) from exc
        driver = cls(client, url)
        try:
            info = await driver.ping()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await client.close()
            raise
        # DOCKER_HOST often points at Podman's socket: then Podman's quirks apply.
        return cast(Self, cls._for_engine(info.engine)(client, url, info.api_version))

    @classmethod
    def _for_engine(cls, engine: str) -> type[EngineAPIDriver]:
        """The driver class for the engine that answered (``docker`` or ``podman``)."""
        return cls

    async def aclose(self) -> None:
        await self._client.close()

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate aiodocker and transport errors into asyncdeploy's, naming the call."""
        try:
            yield
        except aiodocker.DockerError as exc:
            message = f"{what}: {exc.message}"
            if exc.status == 900:
                raise EngineUnavailable(message, engine=self.name) from exc
            if self._missing(exc):
                raise WorkloadNotFound(message, engine=self.name, status=404) from exc
            if self._conflict(exc):
                raise WorkloadConflict(message, engine=self.name, status=exc.status) from exc
            raise EngineAPIError(message, engine=self.name, status=exc.status) from exc
        except _CONNECTION_LOST as exc:
            raise EngineUnavailable(f"{what}: {exc} at {self.url}", engine=self.name) from exc
        except aiohttp.ClientError as exc:
            raise EngineAPIError(f"{what}: {exc}", engine=self.name, status=0) from exc
        except TimeoutError as exc:
            raise EngineTimeout(f"{what}: no answer in time", engine=self.name) from exc

    async def ping(self) -> EngineInfo:
        try:
            with self._errors("ping"), anyio.fail_after(PING_TIMEOUT):
                version = await self._client.version()
        except EngineError as exc:
            raise EngineUnavailable(
                f"no {self.name} engine answers at {self.url}: {exc.message}", engine=self.name
            ) from exc
        components = {str(c.get("Name", "")) for c in version.get("Components") or []}
        return EngineInfo(
            driver=self.name,
            version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            engine="podman" if "Podman Engine" in components else "docker",
        )

    # --- reading state -----------------------------------------------------------------------

    async def _containers(self, labels: Mapping[str, str]) -> builtins.list[dict[str, Any]]:
        """asyncdeploy's containers carrying exactly these (non-empty) label values."""
        wanted = [LABEL_WORKLOAD] + [f"{k}={v}" for k, v in labels.items()]
        with self._errors("list containers"):
            found = await self._client.containers.list(all=True, filters={"label": wanted})
        return [c._container for c in found]

    async def _by_workload(
        self, labels: Mapping[str, str] | None = None
    ) -> dict[str, builtins.list[dict[str, Any]]]:
        grouped: dict[str, builtins.list[dict[str, Any]]] = {}
        for item in await self._containers(labels or {}):
            grouped.setdefault(item["Labels"][LABEL_WORKLOAD], []).append(item)
        return grouped

    async def get(self, name: str) -> WorkloadStatus:
        items = await self._containers({LABEL_WORKLOAD: name})
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name, status=404)
        return await self._marked(name, items, await self._restarts(items))

    async def _marked(
        self, name: str, items: Sequence[Mapping[str, Any]], restarts: Mapping[str, int]
    ) -> WorkloadStatus:
        """Its status, marked half-drained when its pause is paused by a drain whose owner is
        dead (the claim record in the pause container says who; ``_unfinished.py``)."""
        status = workload_status(self.name, name, items, restarts)
        paused = [
            i
            for i in items
            if i["Labels"].get(LABEL_ROLE) == "pause" and i.get("State") == "paused"
        ]
        if status.unfinished or not paused:
            return status
        ref = ContainerRef(id=str(paused[0]["Id"]), name="pause", role="pause", running=True)
        try:
            record = await self.read_claim(ref)
        except EngineError:
            return status  # a look only: the list stands without the mark
        reason = dead_claim(record)
        return attrs.evolve(status, unfinished=reason) if reason else status

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        matching = await self._matching(as_selector(selector))
        restarts = await self._restarts([i for items in matching.values() for i in items])
        return [await self._marked(name, items, restarts) for name, items in matching.items()]

    async def _restarts(self, items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Each container's ``RestartCount`` (the list call does not carry it), inspected
        concurrently; a container removed meanwhile is left out."""
        counts: dict[str, int] = {}

        async def one(ident: str) -> None:
            try:
                with self._errors(f"inspect {ident[:12]}"):
                    data = await self._client.containers.container(ident).show()
            except WorkloadNotFound:
                return
            counts[ident] = int(data.get("RestartCount") or 0)

        async with anyio.create_task_group() as tg:
            for item in items:
                tg.start_soon(one, str(item["Id"]))
        return counts

    async def _matching(
        self, selector: Selector | None
    ) -> dict[str, builtins.list[dict[str, Any]]]:
        """One list call: the workloads ``selector`` matches, by name. Matched here, not by the
        engine's label filter: Podman reads "team=" as "any value"."""
        return {
            name: items
            for name, items in sorted((await self._by_workload()).items())
            if selector is None or selector.matches(workload_labels(items))
        }

    async def _container_id(self, name: str, container: str | None) -> str:
        items = await self._containers({LABEL_WORKLOAD: name})
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name, status=404)
        for item in sorted(items, key=plan_order):  # None: the plan's first run container
            labels = item["Labels"]
            if (container is None and labels.get(LABEL_ROLE) == "run") or labels.get(
                LABEL_CONTAINER
            ) == container:
                return str(item["Id"])
        raise WorkloadNotFound(
            f"workload {name!r} has no container {container!r}", engine=self.name, status=404
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
        handle = self._client.containers.container(ident)
        with self._errors(f"logs of {name}"):
            if not follow:
                for chunk in await handle.log(**params):
                    yield chunk
                return
            async for chunk in handle.log(follow=True, **params):
                yield chunk

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        """Run ``command`` in the container, its output to ``on_output`` as it comes.

        The container is watched meanwhile: one that stops before the command ends (whose
        stream may then never end: Docker with a shared PID namespace) is ``ExecInterrupted``.
        """
        ident = await self._container_id(name, container)
        what = f"exec in {name}"
        result: builtins.list[ExecResult] = []

        async def run_it(scope: anyio.CancelScope) -> None:
            result.append(await self._exec(ident, command, what, on_output))
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_it, tg.cancel_scope)
            stopped = await self._until_stopped(ident, what)
            tg.cancel_scope.cancel()
        if result:
            return result[0]
        raise ExecInterrupted(
            f"{what}: container {container or ident[:12]} {stopped} before the command ended "
            "(the command's output so far was shown)",
            engine=self.name,
        )

    async def _until_stopped(self, ident: str, what: str) -> str:
        """Return once the container no longer runs: how it stopped."""
        handle = self._client.containers.container(ident)
        while True:
            await anyio.sleep(EXEC_WATCH_INTERVAL)
            try:
                with self._errors(what):
                    state = (await handle.show()).get("State") or {}
            except WorkloadNotFound:
                return "was removed"
            if not state.get("Running") or state.get("Paused"):
                return "was paused" if state.get("Paused") else "exited"

    async def _exec(
        self,
        ident: str,
        command: Sequence[str],
        what: str,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        output: builtins.list[str] = []
        with self._errors(what):
            execution = await self._client.containers.container(ident).exec(list(command))
            async with execution.start(detach=False) as stream:
                while (message := await stream.read_out()) is not None:
                    text = message.data.decode(errors="replace")
                    output.append(text)
                    if on_output is not None:
                        on_output(text)
            exit_code = (await execution.inspect())["ExitCode"]
        return ExecResult(
            exit_code=int(exit_code if exit_code is not None else -1), output="".join(output)
        )

    async def inspect(self, name: str) -> dict[str, Any]:
        items = await self._containers({LABEL_WORKLOAD: name})
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name, status=404)
        details = {}
        for item in items:
            with self._errors(f"inspect {name}"):
                data = await self._client.containers.container(item["Id"]).show()
            config = data.get("Config") or {}
            config["Env"] = [mask_env_entry(entry) for entry in config.get("Env") or []]
            details[item["Labels"].get(LABEL_CONTAINER, item["Id"])] = mask_tree(data)
        return {"workload": name, "driver": self.name, "containers": details}

    async def recent_events(self, name: str, *, limit: int) -> builtins.list[WorkloadEvent]:
        items = await self._containers({LABEL_WORKLOAD: name})
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=self.name, status=404)
        since = min(int(i.get("Created") or 0) for i in items)
        params = events_query(name, since, time.time(), engine=self.name)
        with self._errors(f"events of {name}"), anyio.fail_after(HISTORY_TIMEOUT):
            async with self._client._query("events", params=params) as response:
                text = await response.text()
        return parse_events(text.splitlines(), limit=limit)

    async def image_ports(self, image: str) -> frozenset[int] | None:
        try:
            with self._errors(f"inspect image {image}"):
                details = await self._client.images.inspect(image)
        except WorkloadNotFound:
            return None
        exposed = (details.get("Config") or {}).get("ExposedPorts") or {}
        return frozenset(
            int(port)
            for key in exposed
            for port, _, proto in [key.partition("/")]
            if proto in ("", "tcp") and port.isdigit()
        )

    async def wait_ready(self, name: str, *, timeout: float) -> WorkloadStatus:
        """Every run container ready, or ``CreateError`` with the exit code and the logs of one
        that ended first (``_ready.py``)."""
        return await wait_until_ready(self, name, timeout=timeout)

    async def status_of(self, name: str, items: Sequence[Mapping[str, Any]]) -> WorkloadStatus:
        return workload_status(self.name, name, items, await self._restarts(items))

    async def workload_address(self, items: Sequence[Mapping[str, Any]]) -> str | None:
        """Where checks sent from here reach the workload (its pause container's address)."""
        pause = next((i for i in items if i["Labels"].get(LABEL_ROLE) == "pause"), None)
        return None if pause is None else await self.address(str(pause["Id"]))

    # --- the drain (its engine calls: _container_ops.py) -------------------------------------

    async def find(self, names: Sequence[str]) -> EngineFound:
        """One list call: filtered by name for one workload, all of asyncdeploy's for several."""
        names = tuple(dict.fromkeys(names))
        if not names:
            return _found({})
        grouped = await self._by_workload({LABEL_WORKLOAD: names[0]} if len(names) == 1 else None)
        missing = [n for n in names if n not in grouped]
        if missing:
            raise WorkloadNotFound(
                f"no workload named {', '.join(map(repr, missing))}", engine=self.name, status=404
            )
        return _found({n: grouped[n] for n in names})

    async def find_matching(self, selector: Selector | None) -> EngineFound:
        return _found(await self._matching(selector))

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
            self,
            found.snapshots,
            grace_period_seconds=grace_period_seconds,
            emit=emit,
            engine=self.name,
            keep_volumes=keep_volumes,
        )

    # --- create ------------------------------------------------------------------------------

    async def apply(
        self,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill_now: anyio.Event | None = None,
    ) -> ApplyResult:
        """Create the workload; unchanged → no call that writes; changed → drain, then create
        (a failed drain raises ``DrainError`` and creates nothing; a cancellation lets a begun
        drain finish: :func:`~asyncdeploy.drivers._replaced.drain_replaced`)."""
        grouped = await self._by_workload({LABEL_WORKLOAD: plan.name})
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
                        action="unchanged", status=workload_status(self.name, plan.name, existing)
                    )
                if state == "building":
                    # The same plan, half built: another create is at work (or was killed).
                    # Never replace it under that create's feet.
                    raise WorkloadConflict(
                        f"workload {plan.name!r} is being created by another command (it has "
                        f"{', '.join(sorted(map(str, names)))} of {', '.join(sorted(wanted))}), "
                        "or a create of it was killed; wait and retry, or delete it",
                        engine=self.name,
                        status=409,
                    )
                # "dead": the same plan, complete, but not in the state it asks for (left
                # unstarted by a killed create, half deleted, every run container exited):
                # repaired below like a changed plan, its remains drained first.
        # Pull what is needed, then create: a failed pull leaves the old workload serving.
        await ImagePuller(self._client, self.name, self._errors).pull_for(
            plan, emit or ignore_events
        )
        if existing:
            try:
                found = await self.find([plan.name])  # afresh: the pull may have taken long
            except WorkloadNotFound:
                existing = None  # it went in the meantime
            else:
                replaced = await drain_replaced(
                    plan.name,
                    lambda watch: self.drain(found, grace_period_seconds=None, emit=watch),
                    emit or ignore_events,
                    kill_now,
                )
        items = await CreateAttempt(self, plan).run()
        return ApplyResult(
            action="replaced" if existing else "created",
            status=workload_status(self.name, plan.name, items),
            replaced=replaced,
        )

    async def pull(self, plan: WorkloadPlan, *, emit: Emit) -> None:
        await ImagePuller(self._client, self.name, self._errors).pull_for(plan, emit)

    def _config(self, plan: WorkloadPlan, container: Container, pause_id: str) -> dict[str, Any]:
        return spec.container_config(
            plan, container, pause_id, engine=self.name, api_version=self.api_version
        )

    async def _create_container(self, config: dict[str, Any], name: str) -> str:
        """Create one container; the engine's errors pass through untranslated (Podman creates
        containers with CDI devices through libpod)."""
        return str((await self._client.containers.create(config, name=name)).id)
