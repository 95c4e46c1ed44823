"""The one Engine API driver behind Docker and Podman, on aiodocker.

Engine-specific parts (socket discovery, Podman's status codes) live in ``_docker.py`` and
``_podman.py``; the create in ``_create.py``, the pulls in ``_pull.py``, the drain's engine calls
in ``_container_ops.py``; the rest is here. Engine errors are translated in :meth:`_errors` only.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self, cast

import aiodocker
import aiohttp
import anyio
import attrs

from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._create import CreateAttempt
from asyncdeploy.drivers.engine._drain import drain_workloads
from asyncdeploy.drivers.engine._markers import EngineMarkers
from asyncdeploy.drivers.engine._ops import ContainerRef, WorkloadSnapshot
from asyncdeploy.drivers.engine._pull import ImagePuller
from asyncdeploy.drivers.engine._state import plan_order, snapshot, workload_labels, workload_status
from asyncdeploy.drivers.engine._unfinished import dead_claim
from asyncdeploy.errors import (
    CreateError,
    DrainError,
    EngineAPIError,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.events import DrainSummary, Emit, ignore_events
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_PLAN_DIGEST,
    LABEL_READINESS,
    LABEL_ROLE,
    LABEL_WORKLOAD,
)
from asyncdeploy.plan import Container, WorkloadPlan, plan_digest
from asyncdeploy.results import ApplyResult, EngineInfo, ExecResult, WorkloadStatus
from asyncdeploy.secrets import mask_env_entry, mask_tree
from asyncdeploy.selectors import Selector, SelectorLike, as_selector

__all__ = ["EngineAPIDriver", "EngineFound"]

PING_TIMEOUT = 10.0
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
        return await self._marked(name, items)

    async def _marked(self, name: str, items: Sequence[Mapping[str, Any]]) -> WorkloadStatus:
        """Its status, marked half-drained when its pause is paused by a drain whose owner is
        dead (the claim record in the pause container says who; ``_unfinished.py``)."""
        status = workload_status(self.name, name, items)
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
        return [await self._marked(name, items) for name, items in matching.items()]

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
        self, name: str, command: Sequence[str], *, container: str | None = None
    ) -> ExecResult:
        ident = await self._container_id(name, container)
        return await self._exec(ident, command, f"exec in {name}")

    async def _exec(self, ident: str, command: Sequence[str], what: str) -> ExecResult:
        output: builtins.list[str] = []
        with self._errors(what):
            execution = await self._client.containers.container(ident).exec(list(command))
            async with execution.start(detach=False) as stream:
                while (message := await stream.read_out()) is not None:
                    output.append(message.data.decode(errors="replace"))
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

    async def wait_ready(self, name: str, *, timeout: float) -> WorkloadStatus:
        """Poll until every run container runs and passes its readiness check."""
        try:
            with anyio.fail_after(timeout):
                while True:
                    items = await self._containers({LABEL_WORKLOAD: name})
                    if not items:
                        raise WorkloadNotFound(
                            f"no workload named {name!r}", engine=self.name, status=404
                        )
                    runs = [i for i in items if i["Labels"].get(LABEL_ROLE) == "run"]
                    if await self._ready(name, runs):
                        return workload_status(self.name, name, items)
                    await anyio.sleep(0.25)
        except TimeoutError:
            raise EngineTimeout(
                f"workload {name!r} was not ready within {timeout:g} s", engine=self.name
            ) from None

    async def _ready(self, name: str, runs: Sequence[Mapping[str, Any]]) -> bool:
        for item in runs:
            if item.get("State") != "running":
                if item.get("State") == "exited":
                    raise CreateError(
                        f"container {item['Labels'].get(LABEL_CONTAINER)} of {name!r} exited "
                        "while waiting for it to become ready"
                    )
                return False
            readiness = item["Labels"].get(LABEL_READINESS)
            if readiness is not None:
                command = json.loads(readiness)
                result = await self._exec(str(item["Id"]), command, f"readiness of {name}")
                if result.exit_code != 0:
                    return False
        return True

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

    async def apply(self, plan: WorkloadPlan, *, emit: Emit | None = None) -> ApplyResult:
        """Create the workload; unchanged → no call that writes; changed → drain, then create
        (a failed drain raises ``DrainError`` and creates nothing)."""
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
                if names == wanted:
                    return ApplyResult(
                        action="unchanged", status=workload_status(self.name, plan.name, existing)
                    )
                # The same plan, half built: another create is at work (or was killed). Never
                # replace it under that create's feet.
                raise WorkloadConflict(
                    f"workload {plan.name!r} is being created by another command (it has "
                    f"{', '.join(sorted(map(str, names)))} of {', '.join(sorted(wanted))}), or a "
                    "create of it was killed; wait and retry, or delete it",
                    engine=self.name,
                    status=409,
                )
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
                [replaced] = await self.drain(
                    found, grace_period_seconds=None, emit=emit or ignore_events
                )
                if replaced.errors:  # what is left may hold its ports and names: no create
                    raise DrainError([replaced])
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
