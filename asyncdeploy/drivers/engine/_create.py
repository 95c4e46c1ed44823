"""Creating a container-engine workload, and undoing exactly that when it fails or is cancelled.

Order: volumes, the pause container (it holds the namespaces), each init container to
completion, the sidecars, the run containers started at once, the autoheal sidecar; then a last look that
everything is still there (a delete racing the create would not have seen what came after it).

Every container carries its create call's :data:`LABEL_ATTEMPT`, and each engine create call
runs shielded: a create cancelled in flight still learns the id it made. On any failure or
cancellation the roll-back (shielded, bounded) removes what this call recorded and whatever
carries its attempt label, the pause container last, never another create's containers. A call
lost with the connection is tried again; what it still could not remove is named: in the
error raised (a ``CreateError`` from the original one), or in a warning when it was cancelled.
"""

from __future__ import annotations

import builtins
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import attrs

from asyncdeploy._backoff import ENGINE_CALL
from asyncdeploy._errors import (
    ENGINE_FAILURES,
    AsyncDeployError,
    CreateError,
    EngineAPIError,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._owner import Owner
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._devices import accelerators
from asyncdeploy.drivers.engine._ops import ContainerRef
from asyncdeploy.drivers.engine._session import EngineSession, NoAnswer
from asyncdeploy.labels import (
    LABEL_ATTEMPT,
    LABEL_ATTEMPT_OWNER,
    LABEL_CONTAINER,
    LABEL_ROLE,
    LABEL_VOLUME_PLAN,
    LABEL_WORKLOAD,
)
from asyncdeploy.plan import Container, WorkloadPlan

__all__ = ["CreateAttempt"]

_LOG = logging.getLogger("asyncdeploy")
T = TypeVar("T")
_OWNER = json.dumps(Owner.this_process().to_data(), sort_keys=True)  # who makes (unfinished.py)
CREATE_CALL_TIMEOUT = 30.0  # one engine create call, shielded
ROLL_BACK_TIMEOUT = 60.0  # the roll-back, shielded; lost connections retried meanwhile
# What the engines answer when a device cannot be given, and what a user then needs.
_DEVICE_HINTS = {
    'device driver "nvidia"': "is the NVIDIA container toolkit installed, and Docker "
    "restarted after `nvidia-ctk runtime configure --runtime=docker`?",
    "unresolvable CDI devices": "no CDI specification under /etc/cdi or /var/run/cdi defines "
    "it; for NVIDIA GPUs: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
}


@attrs.define
class CreateAttempt:
    """One create call of one plan: what it made, so that its roll-back removes exactly that."""

    session: EngineSession
    ops: EngineContainerOps  # the drain's calls: the roll-back signals and removes with them
    plan: WorkloadPlan
    token: str = attrs.field(factory=lambda: secrets.token_hex(8))
    created: builtins.list[ContainerRef] = attrs.field(factory=list)
    volumes: builtins.list[str] = attrs.field(factory=list)
    left: builtins.list[str] = attrs.field(factory=list)  # what a roll-back could not remove

    async def run(self) -> builtins.list[dict[str, Any]]:
        """Create and start everything; on any failure or cancellation, roll back and re-raise.
        Returns the workload's list entries."""
        plan = self.plan
        # Devices the engine cannot give are refused before anything exists.
        spec.refuse_unsupported_devices(
            plan, engine=self.session.engine, api_version=self.session.api_version
        )
        try:
            await self._create_volumes()
            pause = await self._create_one("pause", spec.pause_config(plan), "pause")
            await self._start(pause)
            for container in plan.init_containers:
                config = self._config(container, pause.id)
                ref = await self._create_one(container.name, config, "init")
                await self._run_init(ref, container)
            # Sidecars (the drain gate, a user's proxy) start before the run containers.
            for role, group in (("sidecar", plan.sidecar_containers), ("run", plan.run_containers)):
                refs = [
                    await self._create_one(c.name, self._config(c, pause.id), role) for c in group
                ]
                await self._start_all(list(zip(refs, group, strict=True)))
            if plan.autoheal is not None:
                config = spec.autoheal_config(plan, _socket_path(self.session.url))
                await self._start(await self._create_one("autoheal", config, "autoheal"))
            return await self._check_intact()
        except Exception as exc:
            left = await self._roll_back_shielded()
            if left:  # the more important news: the engine still holds what failed
                message = (
                    f"{exc}; and the roll-back could not remove {', '.join(left)} "
                    f"(delete workload {plan.name!r} once the engine answers)"
                )
                if isinstance(exc, EngineUnavailable):  # still an engine gone (exit 3)
                    raise EngineUnavailable(message, engine=self.session.engine) from exc
                raise CreateError(message) from exc
            raise
        except BaseException:  # cancelled: the cancellation goes on; what is left is logged
            left = await self._roll_back_shielded()
            if left:
                _LOG.warning(
                    "interrupted create of %r: the roll-back could not remove %s",
                    plan.name,
                    ", ".join(left),
                )
            raise

    async def _roll_back_shielded(self) -> builtins.list[str]:
        self.left = ["everything it made (the roll-back timed out)"]
        with anyio.CancelScope(shield=True), anyio.move_on_after(ROLL_BACK_TIMEOUT):
            self.left = await self._roll_back()
        return self.left

    def _config(self, container: Container, pause_id: str) -> dict[str, Any]:
        session = self.session
        return spec.container_config(
            self.plan, container, pause_id, engine=session.engine, api_version=session.api_version
        )

    async def _create_one(self, container: str, config: dict[str, Any], role: Any) -> ContainerRef:
        session = self.session
        name = spec.container_name(self.plan.name, container)
        labels = {**config["Labels"], LABEL_ATTEMPT: self.token, LABEL_ATTEMPT_OWNER: _OWNER}
        config = {**config, "Labels": labels}
        try:
            # Shielded: a create call cancelled in flight may still make the container, and
            # nothing would know its id. The call answers in well under a second.
            with (
                session.errors(f"create {name}"),
                anyio.fail_after(CREATE_CALL_TIMEOUT, shield=True),
            ):
                ident = await session.create(config, name)
        except WorkloadConflict as exc:
            raise WorkloadConflict(
                f"{name} exists already: another command is creating workload "
                f"{self.plan.name!r}, or it exists; retry, or delete it first ({exc.message})",
                engine=session.engine,
                status=exc.status,
            ) from exc
        except WorkloadNotFound as exc:
            if "image" not in exc.message.lower():  # e.g. the pause container is gone
                raise CreateError(f"create {name} of {self.plan.name!r}: {exc.message}") from exc
            raise CreateError(  # it was pulled (or present) a moment ago: removed since
                f"image {config['Image']!r} for {name} is not on the {session.engine} engine: "
                f"{exc.message}"
            ) from exc
        ref = ContainerRef(id=ident, name=container, role=role, running=True)
        self.created.append(ref)
        return ref

    async def _start(self, ref: ContainerRef, container: Container | None = None) -> None:
        """Start one container; an engine that refuses (no such command, no such device or
        device driver, ...) is a CreateError naming the container and what it asked for."""
        session = self.session
        try:
            with session.errors(f"start {ref.name}"):
                await session.start(ref.id)
        except (EngineAPIError, WorkloadNotFound, WorkloadConflict) as exc:
            if container is not None and container.resources.accelerated:
                hints = [hint for known, hint in _DEVICE_HINTS.items() if known in exc.message]
                raise CreateError(
                    f"the {session.engine} engine cannot give container "
                    f"{spec.container_name(self.plan.name, container.name)} the "
                    f"{accelerators(container)} it asks for: {exc.message}"
                    + "".join(f" ({hint})" for hint in hints)
                ) from exc
            raise CreateError(
                f"container {ref.name} of {self.plan.name!r} did not start: {exc.message}"
            ) from exc

    async def _start_all(self, runs: Sequence[tuple[ContainerRef, Container]]) -> None:
        """Start the run containers at once; their failures come back as one plain error."""
        failures: builtins.list[AsyncDeployError] = []

        async def start(ref: ContainerRef, container: Container) -> None:
            try:
                await self._start(ref, container)
            except AsyncDeployError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for ref, container in runs:
                tg.start_soon(start, ref, container)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise CreateError("; ".join(str(f) for f in failures))

    async def _run_init(self, ref: ContainerRef, container: Container) -> None:
        """Init containers run one after another, each to completion, before any run container."""
        await self._start(ref, container)
        exit_code = await self.ops.wait_exit(ref)
        if exit_code != 0:
            logs = ""
            with self.session.errors(f"logs of {ref.name}"):
                logs = "".join(await self.session.logs(ref.id, stdout=True, stderr=True))
            raise CreateError(
                f"init container {ref.name} of {self.plan.name!r} failed",
                exit_code=exit_code,
                logs=logs,
            )

    async def _check_intact(self) -> builtins.list[dict[str, Any]]:
        """Everything this create made is still there: a delete racing it did not take part of
        it away (that delete would not have seen the containers made after it looked)."""
        items = await self.session.containers({LABEL_WORKLOAD: self.plan.name})
        present = {str(item["Id"]) for item in items}
        lost = [ref.name for ref in self.created if ref.id not in present]
        if lost:
            raise WorkloadConflict(
                f"workload {self.plan.name!r} was deleted by another command while it was "
                f"being created ({', '.join(lost)} gone)",
                engine=self.session.engine,
            )
        return items

    async def _create_volumes(self) -> None:
        session, plan = self.session, self.plan
        mounts = [m for c in plan.containers for m in c.mounts if m.type == "volume"]
        kept = {m.source for m in mounts if m.keep}
        # Shared by the plan's instances (a replacement mounts its predecessor's volume):
        # labelled with the plan's name, so that the last instance to go removes it.
        # (``instance_of``: the replace mark, a library-only plan field on the replace branch)
        plan_name = getattr(plan, "instance_of", None) or plan.name
        for volume in sorted({m.source for m in mounts if m.source}):
            try:
                with session.errors(f"inspect volume {volume}"):
                    await session.show_volume(volume)
                continue  # it existed before: it is not the workload's to remove
            except WorkloadNotFound:
                pass
            # its maker and the plan's labels too: a volume left by a create killed before its
            # containers is listed half-made once that maker is dead (``left_volumes``)
            owned = {**plan.labels, LABEL_VOLUME_PLAN: plan_name, LABEL_ATTEMPT_OWNER: _OWNER}
            labels = {} if volume in kept else owned
            with session.errors(f"create volume {volume}"):
                await session.create_volume(volume, labels)
            self.volumes.append(volume)

    async def _roll_back(self) -> builtins.list[str]:
        """Remove the containers this create recorded and any carrying its attempt label (one
        whose create call was cut off), the pause container last; then its volumes. A call
        lost with the connection is tried again (until the caller's bound); returns what could
        not be removed."""
        ops = self.ops
        refs = {ref.id: ref for ref in self.created}
        try:
            found = await _retried(
                lambda: self.session.containers(
                    {LABEL_WORKLOAD: self.plan.name, LABEL_ATTEMPT: self.token}
                )
            )
        except ENGINE_FAILURES:
            found = []  # what it recorded is still removed below
        for item in found:
            labels = item["Labels"]
            refs.setdefault(
                str(item["Id"]),
                ContainerRef(
                    id=str(item["Id"]),
                    name=labels.get(LABEL_CONTAINER, ""),
                    role=labels.get(LABEL_ROLE, "run"),
                    running=True,
                ),
            )
        left: builtins.list[str] = []
        for ref in sorted(refs.values(), key=lambda r: r.role == "pause"):
            try:
                await _retried(lambda ref=ref: ops.signal(ref, "SIGKILL"))  # type: ignore[misc]
                await _retried(lambda ref=ref: ops.remove(ref))  # type: ignore[misc]
            except WorkloadNotFound:
                pass  # gone already
            except ENGINE_FAILURES:
                left.append(spec.container_name(self.plan.name, ref.name))
        for volume in self.volumes:
            try:
                await _retried(lambda volume=volume: ops.remove_volume(volume))  # type: ignore[misc]
            except WorkloadNotFound:
                pass
            except ENGINE_FAILURES:
                left.append(f"volume {volume}")
        return left


async def _retried(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, tried again with backoff while the engine is unreachable (bounded by the
    caller's timeout); not when it took the call and gave no answer (it would wait as long)."""
    pauses = ENGINE_CALL.pauses()
    while True:
        try:
            return await call()
        except NoAnswer:
            raise
        except EngineUnavailable:
            await anyio.sleep(next(pauses))


def _socket_path(url: str) -> str:
    if not url.startswith("unix://"):
        raise CreateError(f"an autoheal sidecar needs a local engine socket, not {url}")
    return url.removeprefix("unix://")
